"""The evaluation of production search (:mod:`engram_eval.production`): the fixture format and
runner (frozen manifests, the held-out ledger, scoring), the calibrations' fits (on the dev
fixture, :mod:`.calibrate`; on real sessions, :mod:`.calibrate_real`), haystack sessions as
memories (:mod:`.sessions`) and the command bodies of ``engram-eval production``
(:mod:`.commands`). The runtime never imports this package.
"""
