"""``python -m sparklog.dashboard json [--out F]``: the Grafana dashboard's JSON (to stdout or F).
``python -m sparklog.dashboard picture --out F.png``: run :mod:`.scenario` (a real 3-broker
cluster, about 90 s) and draw the dashboard from its recorded metrics."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparklog.dashboard.panels import dashboard_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparklog.dashboard")
    commands = parser.add_subparsers(dest="command", required=True)
    as_json = commands.add_parser("json", help="the Grafana dashboard")
    as_json.add_argument("--out", type=Path, help="write it here (default: stdout)")
    picture = commands.add_parser("picture", help="a real run's metrics drawn as the dashboard shows them")
    picture.add_argument("--out", type=Path, required=True, help="the PNG to write")
    picture.add_argument("--seconds", type=float, default=90.0, help="how long the run lasts (default 90)")
    args = parser.parse_args(argv)
    if args.command == "json":
        if args.out is None:
            sys.stdout.write(dashboard_json())
        else:
            args.out.write_text(dashboard_json())
        return 0
    from sparklog.dashboard.picture import draw
    from sparklog.dashboard.scenario import Timeline, run

    scale = args.seconds / Timeline().ends
    defaults = Timeline()
    plan = Timeline(
        **{
            name: getattr(defaults, name) * scale
            for name in (
                "consumer_starts",
                "consumer_stalls",
                "consumer_resumes",
                "broker_killed",
                "broker_restarted",
                "ends",
            )
        }
    )
    recording, events = run(plan)
    draw(recording, args.out, events, title="sparklog: 3 brokers, a consumer group stalling, broker 3 killed")
    print(f"wrote {args.out} ({len(recording.times)} scrapes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
