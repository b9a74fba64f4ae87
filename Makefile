# The publications as Make targets, over the catalogue of published results (results/catalog.yaml):
#   make planned DATA="FOLDER ..."   publish every planned entry, the planned entries it reads first
#   make results/PATH DATA=...        publish one planned entry (and the planned entries it reads)
# The rules are generated from the catalogue into .publish/catalog.mk (engram-eval catalog
# --makefile; engram_eval/provenance/makefile.py), remade whenever the catalogue is newer: a planned
# entry is a target, the entries it reads its order-only prerequisites, `engram-eval publish ID` its
# recipe (made at HEAD, verified, moved into results/, catalogued); a published file is never made
# again. Plain Make: the catalogue already records what a workflow tool would (hashes, commands,
# commits); Make adds only the order.
ENGRAM_EVAL ?= .venv/bin/engram-eval
DATA ?=
PUBLISH = $(ENGRAM_EVAL) publish $(addprefix --data ,$(DATA))

.PHONY: planned
planned:

.publish/catalog.mk: results/catalog.yaml
	$(ENGRAM_EVAL) catalog --makefile

include .publish/catalog.mk
