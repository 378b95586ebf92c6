"""The router's 5-dimensional state (pure functions; ``rubricflow.methods.roro.router.mlp.RouterMLP`` consumes it).

At step k (0-based) the SLM has proposed a step; with ``u_1..u_k+1`` the SLM uncertainties of its proposals at
steps 1..k+1 (every step's SLM proposal, whether or not it was kept; the prefix includes the current step so the
features are defined at the first step):

0. ``current_uncertainty``     u_{k+1}: uncertainty of the proposal the router is deciding on;
1. ``prefix_min_uncertainty``  min(u_1..u_{k+1});
2. ``prefix_mean_uncertainty`` mean(u_1..u_{k+1});
3. ``step_tokens_norm``        the proposal's token count / ``token_norm`` (a fixed constant);
4. ``step_index_norm``         k / ``step_norm`` (a fixed constant): where in the solution the decision falls.

The fifth feature is our reading, not the paper's text: the paper gives a 5-dimensional state and the text we follow
names four features (0-3) before it breaks off. The step index is policy-independent, so stored states of
trajectories from different routing policies are comparable, and it lets the router spend LRM calls early, where an
error has the most steps to propagate through. ``fifth="none"`` sets it to 0 (the four named features only; the
``roro.steps.fifth_feature`` ablation).
"""

from __future__ import annotations

FEATURE_NAMES = (
    "current_uncertainty",
    "prefix_min_uncertainty",
    "prefix_mean_uncertainty",
    "step_tokens_norm",
    "step_index_norm",
)
STATE_DIM = len(FEATURE_NAMES)


FIFTH_FEATURES = ("step_index", "none")


def router_state(
    uncertainties: list[float], step_tokens: int, step_index: int, token_norm: float = 16.0, step_norm: float = 8.0,
    fifth: str = "step_index",
) -> list[float]:
    """State of the decision at ``step_index`` (0-based); ``uncertainties`` = SLM uncertainties of steps
    0..step_index, the current one last."""
    if fifth not in FIFTH_FEATURES:
        raise ValueError(f"router_state: fifth feature {fifth!r}; expected one of {FIFTH_FEATURES}")
    if len(uncertainties) != step_index + 1:
        raise ValueError(
            f"router_state: need one uncertainty per step up to and including step {step_index}, "
            f"got {len(uncertainties)}"
        )
    if token_norm <= 0 or step_norm <= 0:
        raise ValueError(f"router_state: token_norm and step_norm must be > 0, got {token_norm}, {step_norm}")
    cur = float(uncertainties[-1])
    return [
        cur,
        float(min(uncertainties)),
        float(sum(uncertainties) / len(uncertainties)),
        step_tokens / token_norm,
        step_index / step_norm if fifth == "step_index" else 0.0,
    ]
