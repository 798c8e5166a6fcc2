"""A learned weighted sum of layers (ELMo's scalar mix) trained jointly with a linear classifier."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import BaseEstimator


class ScalarMixClassifier(BaseEstimator):
    """softmax(w) · layers → logistic regression; fitted by full-batch L-BFGS with sklearn's L2 penalty (1 / 2C).

    max_iter=100: more iterations fit the training loss further without a better dev score (measured).
    """

    def __init__(self, C: float = 1.0, max_iter: int = 100, random_state: int = 0) -> None:
        self.C, self.max_iter, self.random_state = C, max_iter, random_state

    def fit(self, layers: np.ndarray, codes: np.ndarray) -> ScalarMixClassifier:
        """layers: (n, n_layers, dim) float32, codes: (n,) class ids 0..k-1."""
        generator = torch.Generator().manual_seed(self.random_state)
        x = torch.from_numpy(np.ascontiguousarray(layers, dtype=np.float32))
        y = torch.from_numpy(np.asarray(codes, dtype=np.int64))
        n, n_layers, dim = x.shape
        classes = int(y.max()) + 1
        self.mix_logits_ = torch.zeros(n_layers, requires_grad=True)
        self.weight_ = (0.01 * torch.randn(dim, classes, generator=generator)).requires_grad_()
        self.bias_ = torch.zeros(classes, requires_grad=True)
        penalty = 1.0 / (2.0 * self.C * n)
        optimizer = torch.optim.LBFGS(
            [self.mix_logits_, self.weight_, self.bias_],
            max_iter=self.max_iter,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-6,
            tolerance_change=1e-9,
        )

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self._logits(x), y) + penalty * self.weight_.pow(2).sum()
            loss.backward()
            return loss

        optimizer.step(closure)
        self.layer_weights_ = torch.softmax(self.mix_logits_, 0).detach().numpy()
        self.n_features_in_ = dim
        return self

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.einsum("l,nld->nd", torch.softmax(self.mix_logits_, 0), x)
        return mixed @ self.weight_ + self.bias_

    def predict(self, layers: np.ndarray) -> np.ndarray:
        """Class ids for (n, n_layers, dim) layer blocks."""
        with torch.no_grad():
            return self._logits(torch.from_numpy(np.ascontiguousarray(layers, dtype=np.float32))).argmax(-1).numpy()
