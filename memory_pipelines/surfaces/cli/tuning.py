"""`memory-pipelines tune` and `memory-pipelines scoring list|activate|restore`: offline tuning of the scoring config.

`tune` loads the retrieval log, fits half-lives and mode weights on the older builds, replays the newer
ones with the active and the proposed config, prints the comparison, and with `--publish` activates the new
version when the gate passes. `scoring activate V` makes any stored version active (that is the rollback);
`scoring restore FILE` makes an export's active config active here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...infra.errors import ConfigError, ValidationError


def _runtime():
    from ...runtime import open_runtime

    return open_runtime()


def _require_extra() -> None:
    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"tuning needs pandas and matplotlib ({exc.name} is missing). "
            "Fix: pip install 'memory-pipelines[dagster]'"
        ) from exc


def _plots_folder(folder: Path) -> None:
    """Make the plots' folder now, so a path that cannot be one fails before the tuning run, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValidationError("--plots", f"cannot be a folder for the plots: {exc.strerror}") from None


def cmd_tune(args: argparse.Namespace) -> int:
    _require_extra()
    from ...tuning.fit import FitOptions
    from ...tuning.frames import check_since
    from ...tuning.publish import jsonable
    from ...tuning.report import format_result
    from ...tuning.run import run_tuning

    if not 0 < args.holdout_fraction < 1:
        raise ValidationError("--holdout-fraction", "must be between 0 and 1 (exclusive)")
    if args.bootstrap < 0:
        raise ValidationError("--bootstrap", "must be 0 or more")
    check_since("--since", args.since)
    if args.plots:
        _plots_folder(Path(args.plots))
    rt = _runtime()
    result = run_tuning(
        rt.pool,
        since_days=args.since,
        holdout_fraction=args.holdout_fraction,
        plots_dir=args.plots,
        publish=args.publish,
        options=FitOptions(n_boot=args.bootstrap),
        owners=args.owner or None,
    )
    if args.json:
        out = {k: v for k, v in result.items() if k != "hit_rates"}
        out["evaluation"] = {k: v for k, v in out["evaluation"].items() if k != "caveats"}
        print(json.dumps(jsonable(out), indent=2, default=str))
    else:
        print(format_result(result))
        if args.caveats:
            print("\n" + result["evaluation"]["caveats"])
    return 0


def cmd_scoring_list(args: argparse.Namespace) -> int:
    from ...context.config import list_configs

    rt = _runtime()
    rows = list_configs(rt.pool)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    print("version  active  created              activated            note")
    for r in rows:
        created = r["created_at"].strftime("%Y-%m-%d %H:%M:%S") if r["created_at"] else "-"
        activated = r["activated_at"].strftime("%Y-%m-%d %H:%M:%S") if r["activated_at"] else "-"
        print(
            f"{r['version']:>7}  {'*' if r['is_active'] else ' ':^6}  {created:<19}  {activated:<19}  "
            f"{r['note'] or ''}"
        )
    return 0


def cmd_scoring_activate(args: argparse.Namespace) -> int:
    from ...context.config import activate

    rt = _runtime()
    activate(rt.pool, args.version)
    print(f"scoring config version {args.version} is active; the next context build uses it")
    return 0


def cmd_scoring_restore(args: argparse.Namespace) -> int:
    from ...context.config import restore_active

    rt = _runtime()
    version, added = restore_active(rt.pool, Path(args.file))
    how = "added as version" if added else "already stored as version"
    print(f"the exported active config is {how} {version}, now active; the next context build uses it")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="fit half-lives and mode weights from the retrieval log, replay held-out "
        "builds with the active and the proposed config, and (--publish) activate it if the "
        "gate passes",
    )
    p.add_argument(
        "--publish",
        action="store_true",
        help="add and activate the proposed config when every gate check passes",
    )
    p.add_argument("--since", type=float, metavar="DAYS", help="only builds of the last DAYS days")
    p.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.3,
        metavar="F",
        help="share of the newest builds held out for evaluation (default 0.3)",
    )
    p.add_argument("--plots", metavar="DIR", help="write PNG plots (hit rates, evaluation) into DIR")
    p.add_argument(
        "--bootstrap",
        type=int,
        default=50,
        metavar="N",
        help="bootstrap refits for the parameters' confidence intervals (default 50)",
    )
    p.add_argument("--owner", action="append", help="only this owner's builds (repeatable; default all)")
    p.add_argument("--caveats", action="store_true", help="also print what an offline replay cannot show")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("scoring", help="scoring config versions: list them, activate one (also the rollback), "
                       "restore an export's")
    ssub = p.add_subparsers(dest="scoring_command", required=True, metavar="ACTION")
    q = ssub.add_parser("list", help="every version, newest first; * marks the active one")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_scoring_list)
    q = ssub.add_parser("activate", help="make VERSION active (an earlier version = rollback)")
    q.add_argument("version", type=int)
    q.set_defaults(func=cmd_scoring_activate)
    q = ssub.add_parser("restore", help="make the active config of an export's scoring_configs.json active here")
    q.add_argument("file", metavar="FILE", help="scoring_configs.json of a `memory-pipelines export` folder")
    q.set_defaults(func=cmd_scoring_restore)
