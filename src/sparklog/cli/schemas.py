"""``sparklog schemas list|show|add``: the value schema versions of typed topics."""

from __future__ import annotations

import argparse
import json

from sparklog.cli.common import CliError, add_cluster_options, admin, print_table, read_text_file


def add_schemas(sub: argparse._SubParsersAction) -> None:
    schemas = sub.add_parser("schemas", help="value schema versions of typed topics")
    ssub = schemas.add_subparsers(dest="schemas_command", required=True, metavar="ACTION")
    p = ssub.add_parser(
        "list",
        help="a topic's schema versions",
        description="Prints a table of a typed topic's value schema versions, oldest first: VERSION "
        "FINGERPRINT (the Avro CRC-64 fingerprint, hex) FIELDS (top-level fields).",
    )
    p.add_argument("topic", metavar="TOPIC", help="a typed topic")
    add_cluster_options(p)
    p.set_defaults(handler=_list)
    p = ssub.add_parser(
        "show",
        help="print a schema version (default: the latest) as JSON",
        description="Prints one value schema version of a typed topic as indented Avro JSON.",
    )
    p.add_argument("topic", metavar="TOPIC", help="a typed topic")
    p.add_argument("--version", type=int, metavar="V", help="the version to print (default: the latest)")
    add_cluster_options(p)
    p.set_defaults(handler=_show)
    p = ssub.add_parser(
        "add",
        help="add a version (refused unless compatible under schema.compatibility)",
        description="Registers FILE as the next value schema version of a typed topic; refused unless it is "
        "compatible with the versions before it under the topic's schema.compatibility (default BACKWARD).",
    )
    p.add_argument("topic", metavar="TOPIC", help="a typed topic")
    p.add_argument("file", metavar="FILE", help="an Avro record schema (.avsc)")
    add_cluster_options(p)
    p.set_defaults(handler=_add)


def _list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        versions = client.schemas(args.topic)
    if not versions:
        raise CliError(f"topic {args.topic!r} has no value schema (it is not a typed topic)")
    rows = [(v.version, v.fingerprint.hex(), len(v.arrow_type)) for v in versions]
    print_table(("VERSION", "FINGERPRINT", "FIELDS"), rows)
    return 0


def _show(args: argparse.Namespace) -> int:
    with admin(args) as client:
        versions = client.schemas(args.topic)
    if not versions:
        raise CliError(f"topic {args.topic!r} has no value schema (it is not a typed topic)")
    chosen = [v for v in versions if args.version is None or v.version == args.version]
    if not chosen:
        raise CliError(f"topic {args.topic!r} has no schema version {args.version}")
    print(json.dumps(json.loads(chosen[-1].json), indent=2))
    return 0


def _add(args: argparse.Namespace) -> int:
    schema = read_text_file(args.file, "FILE")
    with admin(args) as client:
        added = client.register_schema(args.topic, schema)
    print(f"topic {args.topic}: schema version {added.version}")
    return 0
