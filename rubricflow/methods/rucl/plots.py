"""The curriculum plot: lambda_t, S_F and S_A over training steps, with the transition marked, and below it the
reward-hacking monitor (rubricflow.methods.rucl.monitor) over the same steps."""

from __future__ import annotations

from pathlib import Path

from rubricflow.util.io import save_figure


def plot_curriculum(history: list[dict], path: str | Path, transition_step: int | None = None,
                    threshold: float | None = None, title: str = "RuCL curriculum") -> Path:
    """Write a PNG of ``curriculum/lambda_t``, ``reward/s_f``, ``reward/s_a`` (and outcome accuracy) per step.

    ``history`` holds one metrics dict per step with a ``step`` key; NaN points (a tier never applicable in a
    batch) are left as gaps.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = [h["step"] for h in history]

    def series(key):
        return [float("nan") if h.get(key) is None else float(h[key]) for h in history]

    monitor = any(h.get("monitor/relevant_sound") is not None for h in history)
    if monitor:
        fig, (ax, mon) = plt.subplots(2, 1, figsize=(7, 6.0), dpi=110, sharex=True)
    else:
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot(steps, series("reward/s_f"), label="S_F (foundational)", color="tab:blue")
    ax.plot(steps, series("reward/s_a"), label="S_A (advanced)", color="tab:orange")
    ax.plot(steps, series("outcome_accuracy"), label="outcome accuracy", color="tab:green", alpha=0.6, lw=1)
    ax.plot(steps, series("curriculum/lambda_t"), label="lambda_t", color="black", lw=2)
    if threshold is not None:
        ax.axhline(threshold, color="tab:blue", ls=":", lw=1, label=f"threshold {threshold:g}")
    if transition_step is not None:
        ax.axvline(transition_step, color="red", ls="--", lw=1, label=f"transition (step {transition_step})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    if monitor:
        mon.plot(steps, series("monitor/relevant_sound"), color="tab:green",
                 label="correct answers with sound answer-relevant values (independent)")
        mon.plot(steps, series("monitor/judge_clean_relevant_flawed"), color="tab:red",
                 label="judge passes every rubric, independent readout finds a flaw")
        mon.plot(steps, series("monitor/rubric_to_wrong_share"), color="tab:purple",
                 label="share of the rubric reward paid to wrong answers")
        mon.set_ylim(-0.02, 1.02)
        mon.set_title("reward-hacking monitor", fontsize=9)
        mon.legend(fontsize=7, loc="best")
        mon.grid(alpha=0.3)
        mon.set_xlabel("step")
    else:
        ax.set_xlabel("step")
    save_figure(fig, path)
    return path

