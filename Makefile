# The publications as Make targets: written by `engram-eval catalog --makefile` from
# results/catalog.yaml (engram_eval/provenance/makefile.py); do not edit, plan an entry there.
#   make planned DATA="FOLDER ..."   publish every planned entry, inputs first
#   make results/PATH DATA=...        publish one planned entry (and the planned ones it reads)
# Recipes are `engram-eval publish ID` (made at HEAD, verified, moved into results/, catalogued);
# prerequisites are order-only: a published file is never made again.
ENGRAM_EVAL ?= .venv/bin/engram-eval
DATA ?=
PUBLISH = $(ENGRAM_EVAL) publish $(addprefix --data ,$(DATA))

.PHONY: planned
planned:

# published: what each was made from (inputs that are published files)
results/confidence_study/lme_tune.json: | results/lexical/fold0_d20_a0.8.jsonl.gz results/lexical/fold1_d20_a0.8.jsonl.gz
results/confidence_study/lme_tune.png: | results/lexical/fold0_d20_a0.8.jsonl.gz results/lexical/fold1_d20_a0.8.jsonl.gz
results/confidence_study/locomo_tune.json: | results/confidence_study/locomo_tune_default.jsonl.gz
results/confidence_study/locomo_tune.png: | results/confidence_study/locomo_tune_default.jsonl.gz
results/confidence_v7/study_lme_tune.json: | results/rerank_prior/fold0_score_d20_a0.6.jsonl.gz results/rerank_prior/fold1_score_d20_a0.6.jsonl.gz
results/confidence_v7/study_lme_tune.png: | results/rerank_prior/fold0_score_d20_a0.6.jsonl.gz results/rerank_prior/fold1_score_d20_a0.6.jsonl.gz
results/dense_encoder/compare_conv_v1_int8_vs_fp32.json: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/dense_encoder/heldout_locomo_conv_v1_fp32.jsonl.gz
results/dense_encoder/compare_conv_v1_int8_vs_fp32.png: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/dense_encoder/heldout_locomo_conv_v1_fp32.jsonl.gz
results/dense_encoder/compare_conv_v1_vs_bm25_only.json: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/lexical/heldout_locomo_bm25_only.jsonl.gz
results/dense_encoder/compare_conv_v1_vs_bm25_only.png: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/lexical/heldout_locomo_bm25_only.jsonl.gz
results/dense_encoder/compare_conv_v1_vs_topm_default.json: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/dense_encoder/compare_conv_v1_vs_topm_default.png: | results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/dense_encoder/encoder_choice.json: | results/dense_encoder/lme_f0.jsonl.gz results/dense_encoder/lme_f1.jsonl.gz results/dense_encoder/loc_f0.jsonl.gz results/dense_encoder/loc_f1.jsonl.gz results/turn_top_m/topm_lme_d3b1.jsonl.gz results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/lexical/compare_default_vs_first_stage.json: | results/lexical/heldout_lme_default.jsonl.gz results/lexical/heldout_lme_first_stage.jsonl.gz
results/lexical/compare_default_vs_first_stage.png: | results/lexical/heldout_lme_default.jsonl.gz results/lexical/heldout_lme_first_stage.jsonl.gz
results/lexical/compare_default_vs_shipped_v1.json: | results/lexical/heldout_lme_default.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/lexical/compare_default_vs_shipped_v1.png: | results/lexical/heldout_lme_default.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/lexical/compare_first_stage_vs_section1_bm25_only.json: | results/lexical/heldout_lme_first_stage.jsonl.gz results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz
results/lexical/compare_first_stage_vs_section1_bm25_only.png: | results/lexical/heldout_lme_first_stage.jsonl.gz results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz
results/lexical/compare_first_stage_vs_section1_default.json: | results/lexical/heldout_lme_first_stage.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/lexical/compare_first_stage_vs_section1_default.png: | results/lexical/heldout_lme_first_stage.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/lexical/compare_locomo_default_vs_bm25_only.json: | results/lexical/heldout_locomo_bm25_only.jsonl.gz results/lexical/heldout_locomo_default.jsonl.gz
results/lexical/compare_locomo_default_vs_bm25_only.png: | results/lexical/heldout_locomo_bm25_only.jsonl.gz results/lexical/heldout_locomo_default.jsonl.gz
results/lexical/compare_locomo_default_vs_section7_bm25_only.json: | results/lexical/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/lexical/compare_locomo_default_vs_section7_bm25_only.png: | results/lexical/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/lexical/compare_locomo_default_vs_section7_default.json: | results/lexical/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/lexical/compare_locomo_default_vs_section7_default.png: | results/lexical/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/lexical/rerank_choice.json: | results/lexical/fold0_d15_a0.8.jsonl.gz results/lexical/fold0_d20_a0.8.jsonl.gz results/lexical/fold0_d25_a0.8.jsonl.gz results/lexical/fold0_none.jsonl.gz results/lexical/fold1_d15_a0.8.jsonl.gz results/lexical/fold1_d20_a0.8.jsonl.gz results/lexical/fold1_d25_a0.8.jsonl.gz results/lexical/fold1_none.jsonl.gz
results/lexical/tune_lme_stem.yaml: | results/lexical/tune_lme_stem.jsonl.gz
results/lexical/tune_lme_stem.yaml.tuning.json: | results/lexical/tune_lme_stem.jsonl.gz
results/lexical/tune_loc_stem_prefix.yaml: | results/lexical/tune_loc_stem_prefix.jsonl.gz
results/lexical/tune_loc_stem_prefix.yaml.tuning.json: | results/lexical/tune_loc_stem_prefix.jsonl.gz
results/lexical/tuned_first_stage.yaml: | results/lexical/tune_lme_stem.jsonl.gz results/lexical/tune_loc_stem_prefix.jsonl.gz
results/lexical/tuned_first_stage.yaml.tuning.json: | results/lexical/tune_lme_stem.jsonl.gz results/lexical/tune_loc_stem_prefix.jsonl.gz
results/locomo10/ABLATIONS.md: | results/locomo10/bm25_only.jsonl.gz results/locomo10/dense_only.jsonl.gz results/locomo10/flat_bm25.jsonl.gz results/locomo10/hybrid_default.jsonl.gz results/locomo10/hybrid_temporal_flip.jsonl.gz
results/locomo10/analyze_hybrid_default.json: | results/locomo10/hybrid_default.jsonl.gz
results/locomo10/compare_hybrid_default_vs_bm25_only.json: | results/locomo10/bm25_only.jsonl.gz results/locomo10/hybrid_default.jsonl.gz
results/locomo10/compare_hybrid_default_vs_bm25_only.png: | results/locomo10/bm25_only.jsonl.gz results/locomo10/hybrid_default.jsonl.gz
results/locomo10/compare_memo_lexical_vs_bm25_only.json: | results/locomo10/bm25_only.jsonl.gz results/locomo10/memo_lexical.jsonl.gz
results/locomo10/compare_memo_lexical_vs_hybrid_default.json: | results/locomo10/hybrid_default.jsonl.gz results/locomo10/memo_lexical.jsonl.gz
results/locomo10/curves_hybrid_default.png: | results/locomo10/hybrid_default.jsonl.gz
results/locomo_audited/compare_default_vs_bm25_only.json: | results/locomo_audited/bm25_only.jsonl.gz results/locomo_audited/default.jsonl.gz
results/locomo_audited/compare_default_vs_memo_lexical.json: | results/locomo_audited/default.jsonl.gz results/locomo_audited/memo_lexical.jsonl.gz
results/locomo_rerank/compare_ce_both_vs_bm25_only.json: | results/locomo_rerank/heldout_ce_both.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/locomo_rerank/compare_ce_both_vs_bm25_only.png: | results/locomo_rerank/heldout_ce_both.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/locomo_rerank/compare_ce_both_vs_tuned.json: | results/locomo_rerank/heldout_ce_both.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/locomo_rerank/compare_ce_both_vs_tuned.png: | results/locomo_rerank/heldout_ce_both.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/locomo_rerank/compare_ce_tune_vs_bm25_only.json: | results/locomo_rerank/heldout_ce_tune.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/locomo_rerank/compare_ce_tune_vs_bm25_only.png: | results/locomo_rerank/heldout_ce_tune.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/locomo_rerank/compare_ce_tune_vs_tuned.json: | results/locomo_rerank/heldout_ce_tune.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/locomo_rerank/compare_ce_tune_vs_tuned.png: | results/locomo_rerank/heldout_ce_tune.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/locomo_rerank/rerank_choice.json: | results/locomo_rerank/choice_a0.0.jsonl.gz results/locomo_rerank/choice_a0.5.jsonl.gz results/locomo_rerank/choice_a0.7.jsonl.gz results/locomo_rerank/choice_a0.8.jsonl.gz results/locomo_rerank/choice_a0.9.jsonl.gz results/locomo_rerank/choice_none.jsonl.gz
results/longmemeval_s_dev/ABLATIONS.md: | results/longmemeval_s_dev/bm25_only.jsonl.gz results/longmemeval_s_dev/dense_only.jsonl.gz results/longmemeval_s_dev/flat_bm25.jsonl.gz results/longmemeval_s_dev/hybrid_default.jsonl.gz results/longmemeval_s_dev/hybrid_rrf_landed.jsonl.gz results/longmemeval_s_dev/hybrid_temporal_flip.jsonl.gz
results/longmemeval_s_dev/MISSES_hybrid_default.md: | results/longmemeval_s_dev/hybrid_default.jsonl.gz
results/longmemeval_s_dev/analyze_hybrid_default.json: | results/longmemeval_s_dev/hybrid_default.jsonl.gz
results/longmemeval_s_dev/compare_memo_lexical_vs_bm25_only.json: | results/longmemeval_s_dev/bm25_only.jsonl.gz results/longmemeval_s_dev/memo_lexical.jsonl.gz
results/longmemeval_s_dev/compare_memo_lexical_vs_hybrid_default.json: | results/longmemeval_s_dev/hybrid_default.jsonl.gz results/longmemeval_s_dev/memo_lexical.jsonl.gz
results/longmemeval_s_dev/curves_hybrid_default.png: | results/longmemeval_s_dev/hybrid_default.jsonl.gz
results/longmemeval_s_dev_context/context_tokens.json: | results/longmemeval_s_dev_context/hybrid_default.k10.context.jsonl.gz results/longmemeval_s_dev_context/hybrid_default.k5.context.jsonl.gz
results/longmemeval_s_dev_context/hybrid_default.k10.context.jsonl.gz: | results/longmemeval_s_dev/hybrid_default.jsonl.gz
results/longmemeval_s_dev_context/hybrid_default.k5.context.jsonl.gz: | results/longmemeval_s_dev/hybrid_default.jsonl.gz
results/longmemeval_s_dev_rerank/compare_rerank_vs_bm25_only.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz
results/longmemeval_s_dev_rerank/compare_rerank_vs_bm25_only.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz
results/longmemeval_s_dev_rerank/compare_rerank_vs_default.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/longmemeval_s_dev_rerank/compare_rerank_vs_default.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/longmemeval_s_dev_rerank/rerank_choice.json: | results/longmemeval_s_dev_rerank/fold0_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.3.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold0_none.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.3.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold1_none.jsonl.gz
results/longmemeval_s_dev_rerank/rerank_unit_choice.json: | results/longmemeval_s_dev_rerank/fold0_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.3.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold0_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold0_none.jsonl.gz results/longmemeval_s_dev_rerank/fold0_passage_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold0_passage_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold0_passage_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold0_passage_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold0_passage_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold0_session_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold0_session_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold0_session_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold0_session_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold0_session_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.3.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold1_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold1_none.jsonl.gz results/longmemeval_s_dev_rerank/fold1_passage_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold1_passage_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold1_passage_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold1_passage_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold1_passage_a0.9.jsonl.gz results/longmemeval_s_dev_rerank/fold1_session_a0.0.jsonl.gz results/longmemeval_s_dev_rerank/fold1_session_a0.5.jsonl.gz results/longmemeval_s_dev_rerank/fold1_session_a0.7.jsonl.gz results/longmemeval_s_dev_rerank/fold1_session_a0.8.jsonl.gz results/longmemeval_s_dev_rerank/fold1_session_a0.9.jsonl.gz
results/longmemeval_s_dev_split/analyze_heldout_default.json: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_bm25_only.json: | results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_bm25_only.png: | results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_dense_only.json: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/longmemeval_s_dev_split/heldout_dense_only.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_dense_only.png: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/longmemeval_s_dev_split/heldout_dense_only.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_rrf_landed.json: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/longmemeval_s_dev_split/heldout_rrf_landed.jsonl.gz
results/longmemeval_s_dev_split/compare_default_vs_rrf_landed.png: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/longmemeval_s_dev_split/heldout_rrf_landed.jsonl.gz
results/longmemeval_s_dev_split/tuned.yaml: | results/longmemeval_s_dev_split/tuning_run.jsonl.gz
results/longmemeval_s_dev_split/tuned.yaml.tuning.json: | results/longmemeval_s_dev_split/tuning_run.jsonl.gz
results/reports/heldout_default_vs_bm25_only.html: | results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz results/longmemeval_s_dev_split/heldout_default.jsonl.gz
results/reports/heldout_shipped_vs_no_rerank.html: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_first_stage.json: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_first_stage.png: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_section6.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/rerank_prior/heldout_prior_lme_v4.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_section6.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/rerank_prior/heldout_prior_lme_v4.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_v2.json: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_v2.png: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_v3.json: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/rerank_prior/compare_prior_lme_v4_vs_v3.png: | results/rerank_prior/heldout_prior_lme_v4.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/rerank_prior/prior_choice.json: | results/rerank_prior/fold0_score_d20_a0.5.jsonl.gz results/rerank_prior/fold0_score_d20_a0.6.jsonl.gz results/rerank_prior/fold0_score_d20_a0.7.jsonl.gz results/rerank_prior/fold1_score_d20_a0.5.jsonl.gz results/rerank_prior/fold1_score_d20_a0.6.jsonl.gz results/rerank_prior/fold1_score_d20_a0.7.jsonl.gz results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz results/turn_top_m/fold0_none.jsonl.gz results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz results/turn_top_m/fold1_none.jsonl.gz
results/rerank_retrain/retrain_choice.json: | results/lexical/fold0_d20_a0.8.jsonl.gz results/lexical/fold0_none.jsonl.gz results/lexical/fold1_d20_a0.8.jsonl.gz results/lexical/fold1_none.jsonl.gz results/rerank_retrain/fold0_new_a0.6.jsonl.gz results/rerank_retrain/fold0_new_a0.7.jsonl.gz results/rerank_retrain/fold0_new_a0.8.jsonl.gz results/rerank_retrain/fold0_new_a0.9.jsonl.gz results/rerank_retrain/fold0_v2_a0.6.jsonl.gz results/rerank_retrain/fold0_v2_a0.7.jsonl.gz results/rerank_retrain/fold0_v2_a0.9.jsonl.gz results/rerank_retrain/fold1_new_a0.6.jsonl.gz results/rerank_retrain/fold1_new_a0.7.jsonl.gz results/rerank_retrain/fold1_new_a0.8.jsonl.gz results/rerank_retrain/fold1_new_a0.9.jsonl.gz results/rerank_retrain/fold1_v2_a0.6.jsonl.gz results/rerank_retrain/fold1_v2_a0.7.jsonl.gz results/rerank_retrain/fold1_v2_a0.9.jsonl.gz
results/shipped_reranker/compare_locomo_shipped_vs_bm25_only.json: | results/shipped_reranker/heldout_locomo_shipped.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/shipped_reranker/compare_locomo_shipped_vs_bm25_only.png: | results/shipped_reranker/heldout_locomo_shipped.jsonl.gz results/structure/heldout_locomo_bm25_only.jsonl.gz
results/shipped_reranker/compare_locomo_shipped_vs_tuned.json: | results/shipped_reranker/heldout_locomo_shipped.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/shipped_reranker/compare_locomo_shipped_vs_tuned.png: | results/shipped_reranker/heldout_locomo_shipped.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/shipped_reranker/compare_shipped_vs_fp32.json: | results/shipped_reranker/heldout_lme_fp32.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/shipped_reranker/compare_shipped_vs_fp32.png: | results/shipped_reranker/heldout_lme_fp32.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/shipped_reranker/compare_shipped_vs_no_rerank.json: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/shipped_reranker/compare_shipped_vs_no_rerank.png: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/shipped_reranker/compare_shipped_vs_section6.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/shipped_reranker/compare_shipped_vs_section6.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/shipped_reranker/heldout_lme_shipped.jsonl.gz
results/structure/compare_lme_tuned_vs_bm25_only.json: | results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz results/structure/heldout_lme_tuned.jsonl.gz
results/structure/compare_lme_tuned_vs_default.json: | results/longmemeval_s_dev_split/heldout_default.jsonl.gz results/structure/heldout_lme_tuned.jsonl.gz
results/structure/compare_locomo_tuned_vs_bm25_only.json: | results/structure/heldout_locomo_bm25_only.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/structure/compare_locomo_tuned_vs_bm25_only.png: | results/structure/heldout_locomo_bm25_only.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/structure/compare_locomo_tuned_vs_default.json: | results/structure/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/structure/compare_locomo_tuned_vs_default.png: | results/structure/heldout_locomo_default.jsonl.gz results/structure/heldout_locomo_tuned.jsonl.gz
results/systems_leak/compare_bm25s_real_vs_opaque.json: | results/systems_leak/bm25s_opaque.jsonl.gz results/systems_leak/bm25s_real_ids.jsonl.gz
results/systems_leak/compare_bm25s_real_vs_opaque.png: | results/systems_leak/bm25s_opaque.jsonl.gz results/systems_leak/bm25s_real_ids.jsonl.gz
results/systems_leak/compare_prefix_leak_real_vs_opaque.json: | results/systems_leak/prefix_leak_opaque.jsonl.gz results/systems_leak/prefix_leak_real_ids.jsonl.gz
results/systems_leak/compare_prefix_leak_real_vs_opaque.png: | results/systems_leak/prefix_leak_opaque.jsonl.gz results/systems_leak/prefix_leak_real_ids.jsonl.gz
results/systems_leak/report_prefix_leak_real_vs_opaque.html: | results/systems_leak/prefix_leak_opaque.jsonl.gz results/systems_leak/prefix_leak_real_ids.jsonl.gz
results/turn_top_m/absent_choice.json: | results/turn_top_m/fold0_absent_d20_a0.8.jsonl.gz results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz results/turn_top_m/fold0_none.jsonl.gz results/turn_top_m/fold1_absent_d20_a0.8.jsonl.gz results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz results/turn_top_m/fold1_none.jsonl.gz
results/turn_top_m/compare_topm_lme_default.json: | results/lexical/heldout_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/turn_top_m/compare_topm_lme_default.png: | results/lexical/heldout_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/turn_top_m/compare_topm_lme_default_vs_first_stage.json: | results/turn_top_m/heldout_topm_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/turn_top_m/compare_topm_lme_default_vs_first_stage.png: | results/turn_top_m/heldout_topm_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/turn_top_m/compare_topm_lme_default_vs_section6.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/turn_top_m/compare_topm_lme_default_vs_section6.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/turn_top_m/heldout_topm_lme_default.jsonl.gz
results/turn_top_m/compare_topm_lme_first_stage.json: | results/lexical/heldout_lme_first_stage.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/turn_top_m/compare_topm_lme_first_stage.png: | results/lexical/heldout_lme_first_stage.jsonl.gz results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_first_stage.json: | results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_first_stage.png: | results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_fp32.json: | results/turn_top_m/heldout_topm_lme_v3.jsonl.gz results/turn_top_m/heldout_topm_lme_v3_fp32.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_fp32.png: | results/turn_top_m/heldout_topm_lme_v3.jsonl.gz results/turn_top_m/heldout_topm_lme_v3_fp32.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_section6.json: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_section6.png: | results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_v2.json: | results/turn_top_m/heldout_topm_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_lme_v3_vs_v2.png: | results/turn_top_m/heldout_topm_lme_default.jsonl.gz results/turn_top_m/heldout_topm_lme_v3.jsonl.gz
results/turn_top_m/compare_topm_locomo_default.json: | results/lexical/heldout_locomo_default.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/turn_top_m/compare_topm_locomo_default.png: | results/lexical/heldout_locomo_default.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/turn_top_m/compare_topm_locomo_default_vs_bm25_only.json: | results/lexical/heldout_locomo_bm25_only.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/turn_top_m/compare_topm_locomo_default_vs_bm25_only.png: | results/lexical/heldout_locomo_bm25_only.jsonl.gz results/turn_top_m/heldout_topm_locomo_default.jsonl.gz
results/turn_top_m/study_absent.json: | results/turn_top_m/fold0_absent_d20_a0.8.jsonl.gz results/turn_top_m/fold1_absent_d20_a0.8.jsonl.gz
results/turn_top_m/study_absent.png: | results/turn_top_m/fold0_absent_d20_a0.8.jsonl.gz results/turn_top_m/fold1_absent_d20_a0.8.jsonl.gz
results/turn_top_m/study_new.json: | results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz
results/turn_top_m/study_new.png: | results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz
results/turn_top_m/topm_d3b1.yaml: | results/turn_top_m/topm_lme_d3b1.jsonl.gz results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_d3b1.yaml.tuning.json: | results/turn_top_m/topm_lme_d3b1.jsonl.gz results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_first_stage.yaml: | results/turn_top_m/topm_lme_d3b1.jsonl.gz results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_first_stage.yaml.tuning.json: | results/turn_top_m/topm_lme_d3b1.jsonl.gz results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_loc_d3b1.yaml: | results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_loc_d3b1.yaml.tuning.json: | results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_people_first_stage.yaml: | results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_people_first_stage.yaml.tuning.json: | results/turn_top_m/topm_loc_d3b1.jsonl.gz
results/turn_top_m/topm_rerank_choice.json: | results/turn_top_m/fold0_d20_a0.7.jsonl.gz results/turn_top_m/fold0_d20_a0.8.jsonl.gz results/turn_top_m/fold0_d20_a0.9.jsonl.gz results/turn_top_m/fold0_none.jsonl.gz results/turn_top_m/fold1_d20_a0.7.jsonl.gz results/turn_top_m/fold1_d20_a0.8.jsonl.gz results/turn_top_m/fold1_d20_a0.9.jsonl.gz results/turn_top_m/fold1_none.jsonl.gz
results/turn_top_m/topm_retrain_choice.json: | results/turn_top_m/fold0_d20_a0.8.jsonl.gz results/turn_top_m/fold0_new_d20_a0.7.jsonl.gz results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz results/turn_top_m/fold0_new_d20_a0.9.jsonl.gz results/turn_top_m/fold0_none.jsonl.gz results/turn_top_m/fold1_d20_a0.8.jsonl.gz results/turn_top_m/fold1_new_d20_a0.7.jsonl.gz results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz results/turn_top_m/fold1_new_d20_a0.9.jsonl.gz results/turn_top_m/fold1_none.jsonl.gz

# published files are never made again: restore an absent one from git
PUBLISHED = \
  results/confidence/calibration_v3_chat.report.json \
  results/confidence/calibration_v3_chat.report.png \
  results/confidence/calibration_v3_people.report.json \
  results/confidence/calibration_v3_people.report.png \
  results/confidence/dev.frozen.json \
  results/confidence/dev.json \
  results/confidence/full/calibration_v3_chat_full.report.json \
  results/confidence/full/calibration_v3_chat_full.report.png \
  results/confidence/full/calibration_v3_people_full.report.json \
  results/confidence/full/calibration_v3_people_full.report.png \
  results/confidence/full/dev.frozen.json \
  results/confidence/full/dev.json \
  results/confidence/full/heldout_locomo10.frozen.json \
  results/confidence/full/heldout_locomo10.selective.json \
  results/confidence/full/heldout_locomo10.selective.png \
  results/confidence/full/heldout_longmemeval_s_dev.frozen.json \
  results/confidence/full/heldout_longmemeval_s_dev.selective.json \
  results/confidence/full/heldout_longmemeval_s_dev.selective.png \
  results/confidence/full/holdout.frozen.json \
  results/confidence/full/holdout.json \
  results/confidence/full/validation_v2.frozen.json \
  results/confidence/full/validation_v2.json \
  results/confidence/full/validation_v3.frozen.json \
  results/confidence/full/validation_v3.json \
  results/confidence/heldout_locomo10.frozen.json \
  results/confidence/heldout_locomo10.selective.json \
  results/confidence/heldout_locomo10.selective.png \
  results/confidence/heldout_longmemeval_s_dev.frozen.json \
  results/confidence/heldout_longmemeval_s_dev.selective.json \
  results/confidence/heldout_longmemeval_s_dev.selective.png \
  results/confidence/holdout.frozen.json \
  results/confidence/holdout.json \
  results/confidence/validation_v2.frozen.json \
  results/confidence/validation_v2.json \
  results/confidence/validation_v3.before_calibration.frozen.json \
  results/confidence/validation_v3.frozen.json \
  results/confidence/validation_v3.json \
  results/confidence_study/lme_tune.json \
  results/confidence_study/lme_tune.png \
  results/confidence_study/locomo_tune.json \
  results/confidence_study/locomo_tune.png \
  results/confidence_study/locomo_tune_default.jsonl.gz \
  results/confidence_v4/calibration_v4.report.json \
  results/confidence_v4/calibration_v4.report.png \
  results/confidence_v4/heldout_lme.frozen.json \
  results/confidence_v4/heldout_lme.json \
  results/confidence_v4/heldout_lme.png \
  results/confidence_v4/heldout_locomo.frozen.json \
  results/confidence_v4/heldout_locomo.json \
  results/confidence_v4/heldout_locomo.png \
  results/confidence_v4/validation_v3.frozen.json \
  results/confidence_v4/validation_v3.json \
  results/confidence_v4/validation_v4.frozen.json \
  results/confidence_v4/validation_v4.json \
  results/confidence_v5/calibration_v5.report.json \
  results/confidence_v5/calibration_v5.report.png \
  results/confidence_v5/dev.frozen.json \
  results/confidence_v5/dev.json \
  results/confidence_v5/heldout_lme.frozen.json \
  results/confidence_v5/heldout_lme.json \
  results/confidence_v5/heldout_lme.png \
  results/confidence_v5/heldout_locomo.frozen.json \
  results/confidence_v5/heldout_locomo.json \
  results/confidence_v5/heldout_locomo.png \
  results/confidence_v5/holdout.frozen.json \
  results/confidence_v5/holdout.json \
  results/confidence_v5/locomo_tune_default.jsonl.gz \
  results/confidence_v5/validation_v2.frozen.json \
  results/confidence_v5/validation_v2.json \
  results/confidence_v5/validation_v3.frozen.json \
  results/confidence_v5/validation_v3.json \
  results/confidence_v5/validation_v4.frozen.json \
  results/confidence_v5/validation_v4.json \
  results/confidence_v6/calibration_v6.report.json \
  results/confidence_v6/calibration_v6.report.png \
  results/confidence_v6/dev.frozen.json \
  results/confidence_v6/dev.json \
  results/confidence_v6/heldout_lme.frozen.json \
  results/confidence_v6/heldout_lme.json \
  results/confidence_v6/heldout_lme.png \
  results/confidence_v6/heldout_locomo.frozen.json \
  results/confidence_v6/heldout_locomo.json \
  results/confidence_v6/heldout_locomo.png \
  results/confidence_v6/holdout.frozen.json \
  results/confidence_v6/holdout.json \
  results/confidence_v6/locomo_tune_default.jsonl.gz \
  results/confidence_v6/validation_v2.frozen.json \
  results/confidence_v6/validation_v2.json \
  results/confidence_v6/validation_v3.frozen.json \
  results/confidence_v6/validation_v3.json \
  results/confidence_v6/validation_v4.frozen.json \
  results/confidence_v6/validation_v4.json \
  results/confidence_v7/calibration_v7.report.json \
  results/confidence_v7/calibration_v7.report.png \
  results/confidence_v7/cand_c0.1.json \
  results/confidence_v7/cand_c0.1.report.json \
  results/confidence_v7/cand_c0.1.report.png \
  results/confidence_v7/cand_c1.json \
  results/confidence_v7/cand_c1.report.json \
  results/confidence_v7/cand_c1.report.png \
  results/confidence_v7/dev.frozen.json \
  results/confidence_v7/dev.json \
  results/confidence_v7/gate_choice.json \
  results/confidence_v7/heldout_lme.frozen.json \
  results/confidence_v7/heldout_lme.json \
  results/confidence_v7/heldout_lme.png \
  results/confidence_v7/heldout_locomo.frozen.json \
  results/confidence_v7/heldout_locomo.json \
  results/confidence_v7/heldout_locomo.png \
  results/confidence_v7/holdout.frozen.json \
  results/confidence_v7/holdout.json \
  results/confidence_v7/locomo_tune_conv_v1.jsonl.gz \
  results/confidence_v7/order_lme_tune_v6.json \
  results/confidence_v7/order_lme_tune_v6.png \
  results/confidence_v7/order_locomo_tune_v6.json \
  results/confidence_v7/order_locomo_tune_v6.png \
  results/confidence_v7/study_lme_tune.json \
  results/confidence_v7/study_lme_tune.png \
  results/confidence_v7/validation_v2.frozen.json \
  results/confidence_v7/validation_v2.json \
  results/confidence_v7/validation_v3.frozen.json \
  results/confidence_v7/validation_v3.json \
  results/confidence_v7/validation_v4.frozen.json \
  results/confidence_v7/validation_v4.json \
  results/dense_encoder/compare_conv_v1_int8_vs_fp32.json \
  results/dense_encoder/compare_conv_v1_int8_vs_fp32.png \
  results/dense_encoder/compare_conv_v1_vs_bm25_only.json \
  results/dense_encoder/compare_conv_v1_vs_bm25_only.png \
  results/dense_encoder/compare_conv_v1_vs_topm_default.json \
  results/dense_encoder/compare_conv_v1_vs_topm_default.png \
  results/dense_encoder/enc_f0.encoder.card.json \
  results/dense_encoder/enc_f1.encoder.card.json \
  results/dense_encoder/encoder_choice.json \
  results/dense_encoder/heldout_locomo_conv_v1.frozen.json \
  results/dense_encoder/heldout_locomo_conv_v1.jsonl.gz \
  results/dense_encoder/heldout_locomo_conv_v1_fp32.frozen.json \
  results/dense_encoder/heldout_locomo_conv_v1_fp32.jsonl.gz \
  results/dense_encoder/lme_f0.jsonl.gz \
  results/dense_encoder/lme_f1.jsonl.gz \
  results/dense_encoder/loc_f0.jsonl.gz \
  results/dense_encoder/loc_f1.jsonl.gz \
  results/heldout_ledger.json \
  results/lexical/ce_fold0.card.json \
  results/lexical/ce_fold1.card.json \
  results/lexical/compare_default_vs_first_stage.json \
  results/lexical/compare_default_vs_first_stage.png \
  results/lexical/compare_default_vs_shipped_v1.json \
  results/lexical/compare_default_vs_shipped_v1.png \
  results/lexical/compare_first_stage_vs_section1_bm25_only.json \
  results/lexical/compare_first_stage_vs_section1_bm25_only.png \
  results/lexical/compare_first_stage_vs_section1_default.json \
  results/lexical/compare_first_stage_vs_section1_default.png \
  results/lexical/compare_locomo_default_vs_bm25_only.json \
  results/lexical/compare_locomo_default_vs_bm25_only.png \
  results/lexical/compare_locomo_default_vs_section7_bm25_only.json \
  results/lexical/compare_locomo_default_vs_section7_bm25_only.png \
  results/lexical/compare_locomo_default_vs_section7_default.json \
  results/lexical/compare_locomo_default_vs_section7_default.png \
  results/lexical/fold0_d15_a0.8.jsonl.gz \
  results/lexical/fold0_d20_a0.8.jsonl.gz \
  results/lexical/fold0_d25_a0.8.jsonl.gz \
  results/lexical/fold0_none.jsonl.gz \
  results/lexical/fold1_d15_a0.8.jsonl.gz \
  results/lexical/fold1_d20_a0.8.jsonl.gz \
  results/lexical/fold1_d25_a0.8.jsonl.gz \
  results/lexical/fold1_none.jsonl.gz \
  results/lexical/heldout_config.yaml \
  results/lexical/heldout_lme_default.frozen.json \
  results/lexical/heldout_lme_default.jsonl.gz \
  results/lexical/heldout_lme_first_stage.frozen.json \
  results/lexical/heldout_lme_first_stage.jsonl.gz \
  results/lexical/heldout_locomo_bm25_only.frozen.json \
  results/lexical/heldout_locomo_bm25_only.jsonl.gz \
  results/lexical/heldout_locomo_default.frozen.json \
  results/lexical/heldout_locomo_default.jsonl.gz \
  results/lexical/lexical_choice.json \
  results/lexical/rerank_choice.json \
  results/lexical/speed_locomo_tune.json \
  results/lexical/speed_locomo_tune_before.json \
  results/lexical/speed_tune30.json \
  results/lexical/speed_tune30_before.json \
  results/lexical/tune_lme_plain.yaml \
  results/lexical/tune_lme_plain.yaml.tuning.json \
  results/lexical/tune_lme_stem.jsonl.gz \
  results/lexical/tune_lme_stem.yaml \
  results/lexical/tune_lme_stem.yaml.tuning.json \
  results/lexical/tune_loc_plain_none.yaml \
  results/lexical/tune_loc_plain_none.yaml.tuning.json \
  results/lexical/tune_loc_plain_prefix.yaml \
  results/lexical/tune_loc_plain_prefix.yaml.tuning.json \
  results/lexical/tune_loc_stem_none.yaml \
  results/lexical/tune_loc_stem_none.yaml.tuning.json \
  results/lexical/tune_loc_stem_prefix.jsonl.gz \
  results/lexical/tune_loc_stem_prefix.yaml \
  results/lexical/tune_loc_stem_prefix.yaml.tuning.json \
  results/lexical/tuned_first_stage.yaml \
  results/lexical/tuned_first_stage.yaml.tuning.json \
  results/locomo10/ABLATIONS.md \
  results/locomo10/analyze_hybrid_default.json \
  results/locomo10/bm25_only.jsonl.gz \
  results/locomo10/compare_hybrid_default_vs_bm25_only.json \
  results/locomo10/compare_hybrid_default_vs_bm25_only.png \
  results/locomo10/compare_memo_lexical_vs_bm25_only.json \
  results/locomo10/compare_memo_lexical_vs_hybrid_default.json \
  results/locomo10/curves_hybrid_default.png \
  results/locomo10/dense_only.jsonl.gz \
  results/locomo10/flat_bm25.jsonl.gz \
  results/locomo10/hybrid_default.jsonl.gz \
  results/locomo10/hybrid_temporal_flip.jsonl.gz \
  results/locomo10/memo_lexical.jsonl.gz \
  results/locomo_audited/bm25_only.jsonl.gz \
  results/locomo_audited/compare_default_vs_bm25_only.json \
  results/locomo_audited/compare_default_vs_memo_lexical.json \
  results/locomo_audited/default.jsonl.gz \
  results/locomo_audited/memo_lexical.jsonl.gz \
  results/locomo_rerank/ce_both.card.json \
  results/locomo_rerank/ce_tune.card.json \
  results/locomo_rerank/choice_a0.0.jsonl.gz \
  results/locomo_rerank/choice_a0.5.jsonl.gz \
  results/locomo_rerank/choice_a0.7.jsonl.gz \
  results/locomo_rerank/choice_a0.8.jsonl.gz \
  results/locomo_rerank/choice_a0.9.jsonl.gz \
  results/locomo_rerank/choice_none.jsonl.gz \
  results/locomo_rerank/compare_ce_both_vs_bm25_only.json \
  results/locomo_rerank/compare_ce_both_vs_bm25_only.png \
  results/locomo_rerank/compare_ce_both_vs_tuned.json \
  results/locomo_rerank/compare_ce_both_vs_tuned.png \
  results/locomo_rerank/compare_ce_tune_vs_bm25_only.json \
  results/locomo_rerank/compare_ce_tune_vs_bm25_only.png \
  results/locomo_rerank/compare_ce_tune_vs_tuned.json \
  results/locomo_rerank/compare_ce_tune_vs_tuned.png \
  results/locomo_rerank/heldout_ce_both.frozen.json \
  results/locomo_rerank/heldout_ce_both.jsonl.gz \
  results/locomo_rerank/heldout_ce_tune.frozen.json \
  results/locomo_rerank/heldout_ce_tune.jsonl.gz \
  results/locomo_rerank/rerank_choice.json \
  results/locomo_rerank/speed_rerank_locomo_tune30.json \
  results/longmemeval_s_dev/ABLATIONS.md \
  results/longmemeval_s_dev/MISSES_hybrid_default.md \
  results/longmemeval_s_dev/analyze_hybrid_default.json \
  results/longmemeval_s_dev/bm25_only.jsonl.gz \
  results/longmemeval_s_dev/compare_memo_lexical_vs_bm25_only.json \
  results/longmemeval_s_dev/compare_memo_lexical_vs_hybrid_default.json \
  results/longmemeval_s_dev/curves_hybrid_default.png \
  results/longmemeval_s_dev/dense_only.jsonl.gz \
  results/longmemeval_s_dev/dense_pieces.json \
  results/longmemeval_s_dev/flat_bm25.jsonl.gz \
  results/longmemeval_s_dev/hybrid_default.jsonl.gz \
  results/longmemeval_s_dev/hybrid_rrf_landed.jsonl.gz \
  results/longmemeval_s_dev/hybrid_temporal_flip.jsonl.gz \
  results/longmemeval_s_dev/memo_lexical.jsonl.gz \
  results/longmemeval_s_dev/scale.json \
  results/longmemeval_s_dev/scale.png \
  results/longmemeval_s_dev/speed_memo.json \
  results/longmemeval_s_dev/speed_variants_full.json \
  results/longmemeval_s_dev_context/context_tokens.json \
  results/longmemeval_s_dev_context/hybrid_default.k10.context.jsonl.gz \
  results/longmemeval_s_dev_context/hybrid_default.k5.context.jsonl.gz \
  results/longmemeval_s_dev_rerank/ce_fold0.card.json \
  results/longmemeval_s_dev_rerank/ce_fold0_retrained.card.json \
  results/longmemeval_s_dev_rerank/ce_fold1.card.json \
  results/longmemeval_s_dev_rerank/ce_fold1_retrained.card.json \
  results/longmemeval_s_dev_rerank/ce_tune.card.json \
  results/longmemeval_s_dev_rerank/compare_rerank_vs_bm25_only.json \
  results/longmemeval_s_dev_rerank/compare_rerank_vs_bm25_only.png \
  results/longmemeval_s_dev_rerank/compare_rerank_vs_default.json \
  results/longmemeval_s_dev_rerank/compare_rerank_vs_default.png \
  results/longmemeval_s_dev_rerank/fold0_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_a0.3.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_none.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_passage_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_passage_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_passage_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_passage_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_passage_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_session_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_session_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_session_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_session_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold0_session_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.3.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_none.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_passage_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_passage_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_passage_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_passage_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_passage_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_session_a0.0.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_session_a0.5.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_session_a0.7.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_session_a0.8.jsonl.gz \
  results/longmemeval_s_dev_rerank/fold1_session_a0.9.jsonl.gz \
  results/longmemeval_s_dev_rerank/heldout_rerank.frozen.json \
  results/longmemeval_s_dev_rerank/heldout_rerank.jsonl.gz \
  results/longmemeval_s_dev_rerank/rerank_choice.json \
  results/longmemeval_s_dev_rerank/rerank_unit_choice.json \
  results/longmemeval_s_dev_rerank/speed_rerank_tune30.json \
  results/longmemeval_s_dev_split/analyze_heldout_default.json \
  results/longmemeval_s_dev_split/compare_default_vs_bm25_only.json \
  results/longmemeval_s_dev_split/compare_default_vs_bm25_only.png \
  results/longmemeval_s_dev_split/compare_default_vs_dense_only.json \
  results/longmemeval_s_dev_split/compare_default_vs_dense_only.png \
  results/longmemeval_s_dev_split/compare_default_vs_rrf_landed.json \
  results/longmemeval_s_dev_split/compare_default_vs_rrf_landed.png \
  results/longmemeval_s_dev_split/heldout_bm25_only.frozen.json \
  results/longmemeval_s_dev_split/heldout_bm25_only.jsonl.gz \
  results/longmemeval_s_dev_split/heldout_default.frozen.json \
  results/longmemeval_s_dev_split/heldout_default.jsonl.gz \
  results/longmemeval_s_dev_split/heldout_dense_only.frozen.json \
  results/longmemeval_s_dev_split/heldout_dense_only.jsonl.gz \
  results/longmemeval_s_dev_split/heldout_rrf_landed.frozen.json \
  results/longmemeval_s_dev_split/heldout_rrf_landed.jsonl.gz \
  results/longmemeval_s_dev_split/split_manifest.json \
  results/longmemeval_s_dev_split/tuned.yaml \
  results/longmemeval_s_dev_split/tuned.yaml.tuning.json \
  results/longmemeval_s_dev_split/tuning_run.jsonl.gz \
  results/production/abstention_locomo10.json \
  results/production/abstention_locomo10.png \
  results/production/abstention_longmemeval_s_dev.json \
  results/production/abstention_longmemeval_s_dev.png \
  results/production/calibration_v1.report.json \
  results/production/calibration_v1.report.png \
  results/production/dev.frozen.json \
  results/production/dev.json \
  results/production/holdout.frozen.json \
  results/production/holdout.json \
  results/production/validation_v2.frozen.json \
  results/production/validation_v2.json \
  results/reports/heldout_default_vs_bm25_only.html \
  results/reports/heldout_shipped_vs_no_rerank.html \
  results/rerank_prior/compare_prior_lme_v4_vs_first_stage.json \
  results/rerank_prior/compare_prior_lme_v4_vs_first_stage.png \
  results/rerank_prior/compare_prior_lme_v4_vs_section6.json \
  results/rerank_prior/compare_prior_lme_v4_vs_section6.png \
  results/rerank_prior/compare_prior_lme_v4_vs_v2.json \
  results/rerank_prior/compare_prior_lme_v4_vs_v2.png \
  results/rerank_prior/compare_prior_lme_v4_vs_v3.json \
  results/rerank_prior/compare_prior_lme_v4_vs_v3.png \
  results/rerank_prior/fold0_score_d20_a0.5.jsonl.gz \
  results/rerank_prior/fold0_score_d20_a0.6.jsonl.gz \
  results/rerank_prior/fold0_score_d20_a0.7.jsonl.gz \
  results/rerank_prior/fold1_score_d20_a0.5.jsonl.gz \
  results/rerank_prior/fold1_score_d20_a0.6.jsonl.gz \
  results/rerank_prior/fold1_score_d20_a0.7.jsonl.gz \
  results/rerank_prior/heldout_prior_lme_v4.frozen.json \
  results/rerank_prior/heldout_prior_lme_v4.jsonl.gz \
  results/rerank_prior/prior_choice.json \
  results/rerank_prior/speed_tune30.json \
  results/rerank_retrain/ce_new_fold0.card.json \
  results/rerank_retrain/ce_new_fold1.card.json \
  results/rerank_retrain/fold0_new_a0.6.jsonl.gz \
  results/rerank_retrain/fold0_new_a0.7.jsonl.gz \
  results/rerank_retrain/fold0_new_a0.8.jsonl.gz \
  results/rerank_retrain/fold0_new_a0.9.jsonl.gz \
  results/rerank_retrain/fold0_v2_a0.6.jsonl.gz \
  results/rerank_retrain/fold0_v2_a0.7.jsonl.gz \
  results/rerank_retrain/fold0_v2_a0.9.jsonl.gz \
  results/rerank_retrain/fold1_new_a0.6.jsonl.gz \
  results/rerank_retrain/fold1_new_a0.7.jsonl.gz \
  results/rerank_retrain/fold1_new_a0.8.jsonl.gz \
  results/rerank_retrain/fold1_new_a0.9.jsonl.gz \
  results/rerank_retrain/fold1_v2_a0.6.jsonl.gz \
  results/rerank_retrain/fold1_v2_a0.7.jsonl.gz \
  results/rerank_retrain/fold1_v2_a0.9.jsonl.gz \
  results/rerank_retrain/retrain_choice.json \
  results/shipped_reranker/compare_locomo_shipped_vs_bm25_only.json \
  results/shipped_reranker/compare_locomo_shipped_vs_bm25_only.png \
  results/shipped_reranker/compare_locomo_shipped_vs_tuned.json \
  results/shipped_reranker/compare_locomo_shipped_vs_tuned.png \
  results/shipped_reranker/compare_shipped_vs_fp32.json \
  results/shipped_reranker/compare_shipped_vs_fp32.png \
  results/shipped_reranker/compare_shipped_vs_no_rerank.json \
  results/shipped_reranker/compare_shipped_vs_no_rerank.png \
  results/shipped_reranker/compare_shipped_vs_section6.json \
  results/shipped_reranker/compare_shipped_vs_section6.png \
  results/shipped_reranker/heldout_lme_fp32.frozen.json \
  results/shipped_reranker/heldout_lme_fp32.jsonl.gz \
  results/shipped_reranker/heldout_lme_shipped.frozen.json \
  results/shipped_reranker/heldout_lme_shipped.jsonl.gz \
  results/shipped_reranker/heldout_locomo_shipped.frozen.json \
  results/shipped_reranker/heldout_locomo_shipped.jsonl.gz \
  results/shipped_reranker/production_dev.frozen.json \
  results/shipped_reranker/production_dev.json \
  results/shipped_reranker/production_holdout.frozen.json \
  results/shipped_reranker/production_holdout.json \
  results/shipped_reranker/production_validation_v2.frozen.json \
  results/shipped_reranker/production_validation_v2.json \
  results/shipped_reranker/production_validation_v3.frozen.json \
  results/shipped_reranker/production_validation_v3.json \
  results/shipped_reranker/speed_shipped_tune30.json \
  results/structure/compare_lme_tuned_vs_bm25_only.json \
  results/structure/compare_lme_tuned_vs_default.json \
  results/structure/compare_locomo_tuned_vs_bm25_only.json \
  results/structure/compare_locomo_tuned_vs_bm25_only.png \
  results/structure/compare_locomo_tuned_vs_default.json \
  results/structure/compare_locomo_tuned_vs_default.png \
  results/structure/heldout_lme_tuned.frozen.json \
  results/structure/heldout_lme_tuned.jsonl.gz \
  results/structure/heldout_locomo_bm25_only.frozen.json \
  results/structure/heldout_locomo_bm25_only.jsonl.gz \
  results/structure/heldout_locomo_default.frozen.json \
  results/structure/heldout_locomo_default.jsonl.gz \
  results/structure/heldout_locomo_tuned.frozen.json \
  results/structure/heldout_locomo_tuned.jsonl.gz \
  results/structure/locomo_split_manifest.json \
  results/structure/locomo_tuning_run.jsonl.gz \
  results/structure/tuned_by_structure.yaml \
  results/structure/tuned_by_structure.yaml.tuning.json \
  results/systems_leak/bm25s_opaque.jsonl.gz \
  results/systems_leak/bm25s_real_ids.jsonl.gz \
  results/systems_leak/compare_bm25s_real_vs_opaque.json \
  results/systems_leak/compare_bm25s_real_vs_opaque.png \
  results/systems_leak/compare_prefix_leak_real_vs_opaque.json \
  results/systems_leak/compare_prefix_leak_real_vs_opaque.png \
  results/systems_leak/prefix_leak_opaque.jsonl.gz \
  results/systems_leak/prefix_leak_real_ids.jsonl.gz \
  results/systems_leak/report_prefix_leak_real_vs_opaque.html \
  results/turn_top_m/absent_choice.json \
  results/turn_top_m/ce_absent_fold0.card.json \
  results/turn_top_m/ce_absent_fold1.card.json \
  results/turn_top_m/ce_topm_fold0.card.json \
  results/turn_top_m/ce_topm_fold1.card.json \
  results/turn_top_m/ce_topm_tune.card.json \
  results/turn_top_m/compare_topm_lme_default.json \
  results/turn_top_m/compare_topm_lme_default.png \
  results/turn_top_m/compare_topm_lme_default_vs_first_stage.json \
  results/turn_top_m/compare_topm_lme_default_vs_first_stage.png \
  results/turn_top_m/compare_topm_lme_default_vs_section6.json \
  results/turn_top_m/compare_topm_lme_default_vs_section6.png \
  results/turn_top_m/compare_topm_lme_first_stage.json \
  results/turn_top_m/compare_topm_lme_first_stage.png \
  results/turn_top_m/compare_topm_lme_v3_vs_first_stage.json \
  results/turn_top_m/compare_topm_lme_v3_vs_first_stage.png \
  results/turn_top_m/compare_topm_lme_v3_vs_fp32.json \
  results/turn_top_m/compare_topm_lme_v3_vs_fp32.png \
  results/turn_top_m/compare_topm_lme_v3_vs_section6.json \
  results/turn_top_m/compare_topm_lme_v3_vs_section6.png \
  results/turn_top_m/compare_topm_lme_v3_vs_v2.json \
  results/turn_top_m/compare_topm_lme_v3_vs_v2.png \
  results/turn_top_m/compare_topm_locomo_default.json \
  results/turn_top_m/compare_topm_locomo_default.png \
  results/turn_top_m/compare_topm_locomo_default_vs_bm25_only.json \
  results/turn_top_m/compare_topm_locomo_default_vs_bm25_only.png \
  results/turn_top_m/fold0_absent_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold0_d20_a0.7.jsonl.gz \
  results/turn_top_m/fold0_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold0_d20_a0.9.jsonl.gz \
  results/turn_top_m/fold0_new_d20_a0.7.jsonl.gz \
  results/turn_top_m/fold0_new_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold0_new_d20_a0.9.jsonl.gz \
  results/turn_top_m/fold0_none.jsonl.gz \
  results/turn_top_m/fold1_absent_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold1_d20_a0.7.jsonl.gz \
  results/turn_top_m/fold1_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold1_d20_a0.9.jsonl.gz \
  results/turn_top_m/fold1_new_d20_a0.7.jsonl.gz \
  results/turn_top_m/fold1_new_d20_a0.8.jsonl.gz \
  results/turn_top_m/fold1_new_d20_a0.9.jsonl.gz \
  results/turn_top_m/fold1_none.jsonl.gz \
  results/turn_top_m/heldout_topm_lme_default.frozen.json \
  results/turn_top_m/heldout_topm_lme_default.jsonl.gz \
  results/turn_top_m/heldout_topm_lme_first_stage.frozen.json \
  results/turn_top_m/heldout_topm_lme_first_stage.jsonl.gz \
  results/turn_top_m/heldout_topm_lme_v3.frozen.json \
  results/turn_top_m/heldout_topm_lme_v3.jsonl.gz \
  results/turn_top_m/heldout_topm_lme_v3_fp32.frozen.json \
  results/turn_top_m/heldout_topm_lme_v3_fp32.jsonl.gz \
  results/turn_top_m/heldout_topm_locomo_default.frozen.json \
  results/turn_top_m/heldout_topm_locomo_default.jsonl.gz \
  results/turn_top_m/speed_locomo_tune.json \
  results/turn_top_m/speed_tune30.json \
  results/turn_top_m/speed_tune30_before.json \
  results/turn_top_m/study_absent.json \
  results/turn_top_m/study_absent.png \
  results/turn_top_m/study_new.json \
  results/turn_top_m/study_new.png \
  results/turn_top_m/topm_d1b1.yaml \
  results/turn_top_m/topm_d1b1.yaml.tuning.json \
  results/turn_top_m/topm_d1b2.yaml \
  results/turn_top_m/topm_d1b2.yaml.tuning.json \
  results/turn_top_m/topm_d1b3.yaml \
  results/turn_top_m/topm_d1b3.yaml.tuning.json \
  results/turn_top_m/topm_d2b1.yaml \
  results/turn_top_m/topm_d2b1.yaml.tuning.json \
  results/turn_top_m/topm_d3b1.yaml \
  results/turn_top_m/topm_d3b1.yaml.tuning.json \
  results/turn_top_m/topm_first_stage.yaml \
  results/turn_top_m/topm_first_stage.yaml.tuning.json \
  results/turn_top_m/topm_heldout_config.yaml \
  results/turn_top_m/topm_lme_d3b1.jsonl.gz \
  results/turn_top_m/topm_loc_d1b1.yaml \
  results/turn_top_m/topm_loc_d1b1.yaml.tuning.json \
  results/turn_top_m/topm_loc_d1b2.yaml \
  results/turn_top_m/topm_loc_d1b2.yaml.tuning.json \
  results/turn_top_m/topm_loc_d1b3.yaml \
  results/turn_top_m/topm_loc_d1b3.yaml.tuning.json \
  results/turn_top_m/topm_loc_d2b1.yaml \
  results/turn_top_m/topm_loc_d2b1.yaml.tuning.json \
  results/turn_top_m/topm_loc_d3b1.jsonl.gz \
  results/turn_top_m/topm_loc_d3b1.yaml \
  results/turn_top_m/topm_loc_d3b1.yaml.tuning.json \
  results/turn_top_m/topm_people_first_stage.yaml \
  results/turn_top_m/topm_people_first_stage.yaml.tuning.json \
  results/turn_top_m/topm_people_heldout_config.yaml \
  results/turn_top_m/topm_rerank_choice.json \
  results/turn_top_m/topm_retrain_choice.json \
  results/turn_top_m/turn_top_m.json \
  results/turn_top_m/turn_top_m_people.json
$(PUBLISHED):
	@echo "$@: published (results/catalog.yaml) but absent: restore it with git checkout -- $@" >&2; exit 1
