"""What one request may still spend, in prompt tokens' worth of model time.

The limit bounds time as well as the context: a prompt token is decoded, but a branch token
(an option's words past their first token, a label's second letter) is decoded and its whole
vocabulary row read (262k floats on Gemma 3), measured at 2 to 3.3 times a prompt token on this
model at 2 threads (a 1,000-token option against a 1,000-token state; a tree of 7,400 branch
tokens about twice). So a branch token costs READ_TOKEN_COST, and every pass a readout makes
is counted: the default limit's worst case then fits SageMaker's 60 s (docs/scoring.md, Budget).

A plan is built piece by piece (the state, each question's suffix, each option's words, each
rotation) and every piece is tokenized against what is left and spent at once: a request over
its limit stops at the first piece that proves it, after work bounded by the limit, whatever
the whole request would have needed.
"""

from __future__ import annotations

from ..model.tokenizer import TokenLimitExceeded

READ_TOKEN_COST = 3


class TokenBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.spent = 0

    @property
    def left(self) -> int:
        return self.limit - self.spent

    def spend(self, tokens: int) -> None:
        self.spent += tokens
        if self.spent > self.limit:
            raise TokenLimitExceeded(self.limit)
