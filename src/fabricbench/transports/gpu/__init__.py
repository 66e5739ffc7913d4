"""GPUs: the devices and their probe (``devices``), CUDA event timing (``timing``), NCCL (``nccl``) and copies
between and within GPUs (``cuda_copy``)."""
