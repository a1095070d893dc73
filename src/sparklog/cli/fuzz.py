"""``sparklog fuzz [--minutes N] [--cases N] [--seed S] [--brokers B] [--low-privilege | --kafka [--kinds K,...]]``:
fuzz a live local cluster.

Starts a :class:`~sparklog.local_cluster.LocalCluster` (its own ZooKeeper, in a temporary directory
unless ``--work-dir``), sends it hypothesis-drawn cases (:mod:`sparklog.fuzz`) and checks after
them that every broker answers, that everything acknowledged reads back identical, and that
restarts (SIGTERM, then ``kill -9``) recover. Prints progress on stderr and a summary at the end;
exits 1 on any invariant failure (with ``--strict``, on any finding too).

``--low-privilege``: the cluster is secured as ``sparklog up --secure`` does it (SASL_SSL, SCRAM,
ACLs) and the cases are sent by a user that may Read and Write ``fz-own``, only Write ``fz-drop``
and nothing on ``fz-secret`` (the admin fills the last two with marked records), with more cases
aimed at what ACLs guard (replica fetches under any replica id, ``copy_records`` between every pair
of topics, ``offsets_for_leader_epoch``, ``list_offsets``, fetches, ``metadata``). A secret record
reaching that user (or ``fz-own``), or an answer its ACLs do not allow, is an invariant failure
(:mod:`sparklog.fuzz.privileges`).

``--kafka``: the cases go to the brokers' Kafka-protocol listeners instead
(:mod:`sparklog.fuzz.kafka_cases`): Produce requests built with kafka-python's classes carrying
record batches well-formed or mutated (flipped, cut, lying fields, compression bombs), idempotent
producers' retried batches, whole-request mutations (garbage, cut or oversized frames, unknown APIs
and versions), hostile Fetch, ListOffsets, Metadata, OffsetForLeaderEpoch and InitProducerId
requests, connections left half-sent, and SASL logins on each broker's SASL_PLAINTEXT listener
(wrong passwords, unknown users, mechanisms not enabled, messages out of order, mutated or replayed
SCRAM messages, oversized messages and frames, requests before a login or after its session's
lifetime, a second login as another user). After each case every listener must answer ApiVersions
and Metadata on a fresh connection (a SASL listener after a login); everything acknowledged must
read back identical through a Kafka Fetch (and through sparklog's own fetches at the full checks);
a refused request must have stored nothing; a login must succeed only with the right user,
password and mechanism, and nothing but ApiVersions and the login may be answered before it.
``--kinds`` draws only some case kinds (``kafka-produce``, ``kafka-frame``, ``kafka-query``,
``kafka-hang``, ``kafka-login``). A case log of a Kafka run is replayed as one (``--replay``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from pathlib import Path

from sparklog.cli.common import CliError, add_zookeeper_option

DEFAULT_CASES = 1000
UNLIMITED_CASES = 10_000_000


def add_fuzz(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fuzz", help="fuzz a local cluster with malformed requests and check it keeps its promises")
    add_zookeeper_option(p)  # accepted like everywhere; the fuzzer starts its own cluster and ZooKeeper
    p.add_argument("--minutes", type=float, default=None, help="stop after this long (default: when --cases are done)")
    p.add_argument(
        "--cases",
        type=int,
        default=None,
        help=f"cases to run (default {DEFAULT_CASES}; with --minutes, as many as fit)",
    )
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random, printed)")
    p.add_argument("--brokers", type=int, default=1, help="brokers (replication factor min(B, 3); default 1)")
    p.add_argument(
        "--check-every", type=int, default=10, metavar="K", help="read new acknowledgements back every K cases"
    )
    p.add_argument("--full-every", type=int, default=250, metavar="K", help="read everything back every K cases")
    p.add_argument(
        "--restart-every",
        type=int,
        default=0,
        metavar="N",
        help="restart the brokers every N cases too (default: at the end)",
    )
    p.add_argument(
        "--low-privilege",
        action="store_true",
        help="secure the cluster (SASL_SSL, SCRAM, ACLs as `sparklog up --secure`) and send the cases as a user "
        "that may Read and Write fz-own, only Write fz-drop and nothing on fz-secret (both filled by the admin "
        "with marked records), adding replica fetches, copy_records between every pair of topics, "
        "offsets_for_leader_epoch, list_offsets, fetches and metadata; a marked record reaching the user (or "
        "fz-own), or an answer its ACLs do not allow, is an invariant failure (--replay a case log of such a "
        "run with it too)",
    )
    p.add_argument(
        "--kafka",
        action="store_true",
        help="send the cases to the brokers' Kafka-protocol listeners: Produce requests with well-formed or "
        "mutated record batches (flipped, cut, lying fields, compression bombs, every codec), idempotent "
        "producers' retries (kafka-produce), whole-request mutations (garbage, cut or oversized frames, "
        "unknown APIs and versions: kafka-frame), hostile Fetch/ListOffsets/Metadata/OffsetForLeaderEpoch/"
        "InitProducerId requests (kafka-query), half-sent requests (kafka-hang) and SASL logins on a "
        "SASL_PLAINTEXT listener (wrong passwords, unknown users, odd mechanisms, out-of-order, mutated or "
        "replayed SCRAM messages, oversized messages and frames, requests before a login or after its "
        "session: kafka-login); each listener must keep answering, everything acknowledged must read back "
        "identical through a Kafka Fetch and sparklog's reader, a refused request must store nothing, and "
        "only a right login may be served",
    )
    p.add_argument(
        "--kinds",
        default=None,
        metavar="K,...",
        help="with --kafka: draw only these case kinds (kafka-produce, kafka-frame, kafka-query, kafka-hang, "
        "kafka-login)",
    )
    p.add_argument("--replay", default=None, metavar="CASES.jsonl", help="apply the cases of a case log again")
    p.add_argument("--upto", type=int, default=None, metavar="I", help="with --replay: stop after case I")
    p.add_argument("--work-dir", default=None, metavar="DIR", help="keep the cluster and the case log here")
    p.add_argument("--strict", action="store_true", help="exit 1 on findings too (not only invariant failures)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object on stdout")
    p.set_defaults(handler=run_fuzz_command)


def run_fuzz_command(args: argparse.Namespace) -> int:
    try:
        from sparklog.fuzz.kafka_cases import KAFKA_KINDS, is_kafka_case
        from sparklog.fuzz.runner import FuzzConfig, print_progress, read_case_log, run_fuzz
    except ImportError as exc:
        raise CliError(f"sparklog fuzz needs hypothesis ({exc}): pip install 'sparklog[test]'") from None
    for name in ("minutes", "cases", "brokers", "check_every", "full_every"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise CliError(f"--{name.replace('_', '-')} must be positive")
    if args.restart_every < 0:
        raise CliError("--restart-every must be 0 (at the end only) or positive")
    if args.kafka and args.low_privilege:
        raise CliError(
            "--kafka and --low-privilege do not go together: --kafka fuzzes a plain cluster's Kafka listeners and "
            "their SASL logins, --low-privilege a secured cluster's Flight calls; run them one at a time"
        )
    kinds = tuple(KAFKA_KINDS)
    if args.kinds is not None:
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        unknown = [k for k in kinds if k not in KAFKA_KINDS]
        if not args.kafka or not kinds or unknown:
            raise CliError(f"--kinds takes --kafka and some of {', '.join(KAFKA_KINDS)} (got {args.kinds!r})")
    replay = None
    if args.replay:
        try:
            replay = read_case_log(Path(args.replay), args.upto)
        except (OSError, ValueError, KeyError) as exc:
            raise CliError(f"--replay {args.replay}: not a case log ({exc})") from None
    kafka = args.kafka or any(is_kafka_case(case) for case in replay or [])
    cases = args.cases or (UNLIMITED_CASES if args.minutes else DEFAULT_CASES)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    keep = args.work_dir is not None
    work = Path(args.work_dir) if keep else Path(tempfile.mkdtemp(prefix="sparklog-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"cases-seed-{seed}.jsonl"
    if replay is not None:
        what = f"replaying {len(replay)} cases of {args.replay}"
    else:
        what = f"seed {seed}; {cases if args.cases or not args.minutes else 'unlimited'} cases"
    if args.low_privilege:
        what += "; as a low-privilege user on a secured cluster"
    if kafka:
        what += "; on the Kafka listeners" + (f" ({', '.join(kinds)})" if args.kinds else "")
    limit = f", at most {args.minutes:g} min" if args.minutes else ""
    print_progress(f"{what}{limit}; case log {log_path}")
    config = FuzzConfig(
        seed=seed,
        cases=cases,
        minutes=args.minutes,
        brokers=args.brokers,
        check_every=args.check_every,
        full_every=args.full_every,
        restart_every=args.restart_every,
        work_dir=work,
        log_path=log_path,
        progress=print_progress,
        replay=replay,
        low_privilege=args.low_privilege,
        kafka=kafka,
        kafka_kinds=kinds,
    )
    report = run_fuzz(config)
    failed = not report.ok or (args.strict and report.findings)
    if args.json:
        print(json.dumps(report.to_json(), default=repr))
    else:
        print(report.summary())
    if failed or report.findings:
        keep = True
    if keep:
        print_progress(f"kept {work} (case log, cluster data and broker logs)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0
