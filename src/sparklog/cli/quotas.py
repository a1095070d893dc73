"""``sparklog quotas set|remove|list``: client quotas of users (Kafka's ``producer_byte_rate``,
``consumer_byte_rate`` and ``request_rate``), enforced by brokers with ``authorizer.enabled=true``
(:mod:`sparklog.security.quotas`). With ``--bootstrap-server`` / ``--command-config`` through brokers
(Kafka's AlterClientQuotas/DescribeClientQuotas: AlterConfigs, or for ``list`` DescribeConfigs, on
the cluster; no ZooKeeper access needed), else in ZooKeeper directly."""

from __future__ import annotations

import argparse

from sparklog.cli.common import CliError, add_cluster_options, admin
from sparklog.coordination.zk_layout import DEFAULT_QUOTA_USER
from sparklog.errors import InvalidRequest
from sparklog.security.quotas import RATES, Quota


def add_quotas(sub: argparse._SubParsersAction) -> None:
    quotas = sub.add_parser("quotas", help="set, remove and list users' client quotas (byte and request rates)")
    qsub = quotas.add_subparsers(dest="quotas_command", required=True, metavar="ACTION")

    p = qsub.add_parser(
        "set",
        help="set a user's quota, or the default of every user without its own",
        description="Replaces the user's quota with the rates given (per second; a rate not given is "
        "unlimited, or for a user with its own quota, taken from the default).",
    )
    _add_user_options(p)
    p.add_argument("--producer-byte-rate", type=float, metavar="N", help="bytes per second a user may produce")
    p.add_argument("--consumer-byte-rate", type=float, metavar="N", help="bytes per second a user may fetch")
    p.add_argument("--request-rate", type=float, metavar="N", help="requests per second a user may make")
    add_cluster_options(p)
    p.set_defaults(handler=_set)

    p = qsub.add_parser("remove", help="remove a user's quota, or the default one")
    _add_user_options(p)
    add_cluster_options(p)
    p.set_defaults(handler=_remove)

    p = qsub.add_parser("list", help="list the quotas")
    add_cluster_options(p)
    p.set_defaults(handler=_list)


def _add_user_options(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="NAME", help="the user")
    who.add_argument("--user-default", action="store_true", help="every user without a quota of its own")


def _user(args: argparse.Namespace) -> str:
    return DEFAULT_QUOTA_USER if args.user_default else args.user


def _shown(user: str) -> str:
    return "the default user quota" if user == DEFAULT_QUOTA_USER else f"the quota of user {user!r}"


def _set(args: argparse.Namespace) -> int:
    user = _user(args)
    try:
        quota = Quota(args.producer_byte_rate, args.consumer_byte_rate, args.request_rate)
    except InvalidRequest as exc:
        raise CliError(str(exc)) from None
    if quota.empty:
        raise CliError("give at least one of --producer-byte-rate, --consumer-byte-rate, --request-rate")
    with admin(args) as client:
        client.set_client_quota(user, quota)
    print(f"set {_shown(user)}: {_rates(quota)}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    user = _user(args)
    with admin(args) as client:
        if not client.remove_client_quota(user):
            raise CliError(f"there is no {_shown(user)[4:]}")
    print(f"removed {_shown(user)}")
    return 0


def _rates(quota: Quota) -> str:
    return " ".join(f"{name}={_number(getattr(quota, name))}" for name in RATES if getattr(quota, name) is not None)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _list(args: argparse.Namespace) -> int:
    with admin(args) as client:
        quotas = client.describe_client_quotas()
    for user, quota in quotas.items():
        print(f"{user} {_rates(quota)}")
    return 0
