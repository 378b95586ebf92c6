"""The RoRo router: a 2-layer MLP (128 hidden units) over a 5-dimensional routing state.

At every solution step the small model (SLM) proposes the next step; the router reads the state of that proposal
(see ``rubricflow.methods.roro.router.features``: current-step uncertainty, min and mean uncertainty over the
prefix, the step's token count normalised by a constant, the normalised step index) and picks an action: ``0`` keep
the SLM's step, ``1`` have the large model (LRM) write the step instead. It is trained with GRPO on sampled actions
(``rubricflow.methods.roro.router.train``), so it exposes action log-probs and sampling; evaluation acts greedily.
"""

from __future__ import annotations

import torch
from torch import nn

STATE_DIM = 5
KEEP_SLM, CALL_LRM = 0, 1


class RouterMLP(nn.Module):
    """``state [..., 5] -> action logits [..., 2]`` through Linear(5, hidden) - ReLU - Linear(hidden, 2)."""

    def __init__(self, state_dim: int = STATE_DIM, hidden: int = 128, n_actions: int = 2, init_call_bias: float = 0.0):
        super().__init__()
        self.state_dim = state_dim
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))
        with torch.no_grad():
            # Small output weights: the initial policy is close to a coin with P(call LRM) = sigmoid(init_call_bias).
            self.net[2].weight.mul_(0.1)
            self.net[2].bias.zero_()
            self.net[2].bias[CALL_LRM] = init_call_bias

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        if states.shape[-1] != self.state_dim:
            raise ValueError(f"RouterMLP: expected states with last dim {self.state_dim}, "
                             f"got shape {tuple(states.shape)}")
        return self.net(states)

    def log_probs(self, states: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.forward(states).float(), dim=-1)

    @torch.no_grad()
    def act(self, states: torch.Tensor, greedy: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        """Actions ``[...]`` (0 = keep SLM, 1 = call LRM): argmax when ``greedy``, else sampled."""
        probs = self.log_probs(states).exp()
        if greedy:
            return probs.argmax(-1)
        flat = probs.reshape(-1, probs.shape[-1])
        return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def save_router(router: RouterMLP, path, meta: dict | None = None) -> None:
    torch.save({"state_dict": router.state_dict(), "state_dim": router.state_dim,
                "hidden": router.net[0].out_features, "meta": meta or {}}, path)


def load_router(path) -> tuple[RouterMLP, dict]:
    blob = torch.load(path, map_location="cpu", weights_only=False)
    r = RouterMLP(blob["state_dim"], blob["hidden"])
    r.load_state_dict(blob["state_dict"])
    return r.eval(), blob.get("meta", {})
