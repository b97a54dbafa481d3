"""Issue 24's plot polish without a browser: legends in words, a raw line only where the legend has room, none for
a single point, and a compare axis that ends at the longest job's last step."""

from __future__ import annotations

from components.jobs import monitor as job_monitor


def test_legends_name_metrics_in_words_and_only_a_plot_of_one_metric_names_its_raw_line():
    rows = [
        {"step": s, "loss": 1.0, "reward": 0.5, "rewards/fmt/mean": 0.2, "perf/tokens_per_second": 9.0} for s in (1, 2)
    ]
    views = job_monitor.plot_views("grpo", rows)
    assert set(views["throughput"].frame["series"]) == {"tokens/s", "tokens/s (raw)"}
    # Three metrics with a raw line each made six legend entries, cut off at the plot's edge: smoothed lines only.
    assert set(views["reward"].frame["series"]) == {"reward (mean)", "fmt"}
    assert list(views["reward"].color_map) == ["reward (mean)", "fmt"]


def test_one_point_draws_no_raw_line_over_its_smoothed_one():
    view = job_monitor.plot_views("sft", [{"step": 1, "loss": 2.0}])["loss"]
    assert view.frame.to_dict("records") == [{"step": 1, "value": 2.0, "series": "loss"}]
    assert view.color_map == {"loss": job_monitor.PALETTE[0][0]}


def test_the_compare_axis_ends_at_the_longest_jobs_last_step_not_a_rounder_number():
    curves = [("a", [{"step": s, "loss": 1.0} for s in range(1, 11)]), ("b", [{"step": 130, "loss": 1.0}])]
    assert job_monitor.compare_axis(curves, "loss") == [0, 130]  # the old axis ran on to 200
    assert job_monitor.compare_axis(curves, "reward") == [0, job_monitor.MIN_X_SPAN]
    assert job_monitor.compare_axis(curves[:1], "loss") == [0, job_monitor.MIN_X_SPAN]  # whole-number ticks


def test_the_compare_view_offers_every_metric_each_method_monitors():
    """A reward model's accuracy and margin (or any new method's metrics) were not among the metrics to compare."""
    from backend.api import methods, monitoring

    offered = job_monitor.compare_metrics()
    assert offered[0] == "loss" and len(set(offered)) == len(offered)
    for method in methods():
        missing = set(monitoring(method).metrics) - set(offered)
        assert not missing, f"{method}'s {sorted(missing)} cannot be compared"
    frame = job_monitor.compare_frame(
        [("rm-a", [{"step": 1, "accuracy": 0.6}]), ("rm-b", [{"step": 1, "accuracy": 0.7}])], "accuracy"
    )
    assert frame is not None and set(frame["job"]) == {"rm-a", "rm-b"}
