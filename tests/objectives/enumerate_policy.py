"""A tabular autoregressive policy small enough to enumerate every response exactly (test helper).

Tokens are 0..V-1; with `eos=True` token 0 ends a response (it is counted, like the real EOS). Responses stop at EOS
or after `length` tokens. A policy is a table of logits `theta: (H, V)`, one row per history (prefix that can still
emit a token); pi(y | h) = softmax(theta[h])[y] and a response's probability is the product over its tokens.
"""

from __future__ import annotations

import torch


class TabularPolicy:
    def __init__(self, vocab: int = 3, length: int = 3, eos: bool = True):
        self.vocab, self.length, self.eos = vocab, length, eos
        self.histories: list[tuple[int, ...]] = []  # prefixes that emit a next token
        self.sequences: list[tuple[int, ...]] = []  # complete responses

        def grow(prefix: tuple[int, ...]) -> None:
            self.histories.append(prefix)
            for y in range(vocab):
                x = prefix + (y,)
                if (eos and y == 0) or len(x) == length:
                    self.sequences.append(x)
                else:
                    grow(x)

        grow(())
        self.hist_index = {h: i for i, h in enumerate(self.histories)}
        N, L = len(self.sequences), length
        self.tokens = torch.zeros(N, L, dtype=torch.long)  # (N, L) padded with 0
        self.hist = torch.zeros(N, L, dtype=torch.long)  # (N, L) history row of each position
        self.mask = torch.zeros(N, L, dtype=torch.bool)
        for n, x in enumerate(self.sequences):
            for t, y in enumerate(x):
                self.tokens[n, t], self.hist[n, t], self.mask[n, t] = y, self.hist_index[x[:t]], True

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.histories), self.vocab

    def token_logp(self, theta: torch.Tensor) -> torch.Tensor:
        """(N, L) log pi(y_t | h_t) of every enumerated response, 0 at padding. Differentiable in theta."""
        logsm = torch.log_softmax(theta, -1)  # (H, V)
        lp = logsm[self.hist, self.tokens]
        return torch.where(self.mask, lp, torch.zeros((), dtype=lp.dtype))

    def seq_logp(self, theta: torch.Tensor) -> torch.Tensor:
        """(N,) log pi(x)."""
        return self.token_logp(theta).sum(-1)

    def history_probs(self, theta: torch.Tensor) -> torch.Tensor:
        """(H,) probability that a response sampled from theta passes through each history."""
        logsm = torch.log_softmax(theta, -1)
        out = []
        for h in self.histories:
            lp = theta.new_zeros(())
            for k, y in enumerate(h):
                lp = lp + logsm[self.hist_index[h[:k]], y]
            out.append(lp.exp())
        return torch.stack(out)
