"""The scoring layer: prompts, the scoring plan, the readouts and the state cache, over the
model layer."""
