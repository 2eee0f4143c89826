"""Whether a decision scored in a batch, beside other sequences or after the KV cache held others,
gives the same bits as alone."""
