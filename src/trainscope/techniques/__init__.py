"""Training techniques a run switches on: precision (fp32/tf32/fp16/bf16) and activation
checkpointing. Both wrap the model or the step; neither knows about strategies."""
