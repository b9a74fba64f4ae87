"""provenance"""
