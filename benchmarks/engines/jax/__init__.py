"""Standalone JAX engine: Qwen3/Llama-3 targets and the DFlash draft, one concept per file.

model.py (target decoder + KV cache), draft.py (DFlash draft), loader.py (HF folders -> params),
decode.py (AR and DFlash loops, and the batched sampler), score.py (teacher-forced log-likelihoods of samples),
engine.py (JaxEngine, the harness's Engine protocol).
"""
