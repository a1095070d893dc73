#!/usr/bin/env bash
# Install nftables (the `nft` command), which the several-hosts harness (sparklog.hosts.network)
# uses for packet faults: a partition between hosts, a share of packets lost. Needs root and
# apt-get; elsewhere it says so and the tests that need it skip with that reason.
# Idempotent; prints one line saying what it did.
set -euo pipefail

if command -v nft >/dev/null 2>&1; then
    echo "install_nftables: nft already installed"
    exit 0
fi
if [[ "$(id -u)" != "0" ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_nftables: not root or no apt-get: nft not installed (packet-fault tests will skip)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q nftables >/tmp/install_nftables.log 2>&1; then
    apt-get update -q >>/tmp/install_nftables.log 2>&1 || true
    apt-get install -y -q nftables >>/tmp/install_nftables.log 2>&1 || {
        echo "install_nftables: apt-get failed, see /tmp/install_nftables.log (packet-fault tests will skip)"
        exit 0
    }
fi
echo "install_nftables: installed $(nft --version)"
