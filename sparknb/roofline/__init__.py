"""The memory-bandwidth limit from the model's own bytes: the checkpoint's tensor table, the byte census of one decode
step, and the limit as a curve over context length."""
