#!/usr/bin/env bash
# Install a ZooKeeper server usable by sparklog.coordination.zookeeper_server.EmbeddedZooKeeper.
#
# Idempotent and fast when ZooKeeper is already present. Order of preference:
#   1. already installed: Debian jar (/usr/share/java/zookeeper.jar) or jars in .deps/zookeeper/
#   2. root + apt-get:    apt-get install zookeeper (Debian package, brings a headless JRE, starts nothing)
#   3. otherwise:         Maven Central via `mvn dependency:copy-dependencies` into .deps/zookeeper/
#
# Set SPARKLOG_ZOOKEEPER_INSTALL=mvn to force the Maven fallback (e.g. to test it).
# Prints exactly one line saying what it used (plus errors on stderr).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="$ROOT/.deps/zookeeper"
POM="$ROOT/scripts/zookeeper-pom.xml"
DEBIAN_JAR=/usr/share/java/zookeeper.jar
FORCE="${SPARKLOG_ZOOKEEPER_INSTALL:-}"

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }
# .deps/zookeeper counts as installed only if it was filled from the current pom.
have_deps_jars() {
    compgen -G "$DEPS_DIR/zookeeper-3.*.jar" >/dev/null &&
        [[ -f "$DEPS_DIR/.pom.sha256" && "$(cat "$DEPS_DIR/.pom.sha256")" == "$(pom_hash)" ]]
}

install_mvn() {
    command -v mvn >/dev/null || { echo "install_zookeeper: mvn not found, cannot fetch ZooKeeper" >&2; exit 1; }
    command -v java >/dev/null || { echo "install_zookeeper: java not found (need a JRE >= 11)" >&2; exit 1; }
    local tmp="$DEPS_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
        echo "install_zookeeper: mvn failed, see $tmp.log" >&2
        tail -n 20 "$tmp.log" >&2
        rm -rf "$tmp"
        exit 1
    fi
    rm -f "$tmp.log"
    pom_hash >"$tmp/.pom.sha256"
    rm -rf "$DEPS_DIR"
    mv "$tmp" "$DEPS_DIR"
    echo "install_zookeeper: fetched $(basename "$(ls "$DEPS_DIR"/zookeeper-3.*.jar | head -n1)") and dependencies from Maven Central into $DEPS_DIR"
}

if [[ "$FORCE" == mvn ]]; then
    if have_deps_jars; then
        echo "install_zookeeper: already present in $DEPS_DIR (Maven jars)"
    else
        install_mvn
    fi
    exit 0
fi

if [[ -f "$DEBIAN_JAR" ]] && command -v java >/dev/null; then
    echo "install_zookeeper: already installed (Debian package zookeeper, $DEBIAN_JAR)"
    exit 0
fi
if have_deps_jars && command -v java >/dev/null; then
    echo "install_zookeeper: already present in $DEPS_DIR (Maven jars)"
    exit 0
fi

if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt_log="$(mktemp)"
    trap 'rm -f "$apt_log"' EXIT
    run_apt() {
        if ! "$@" >>"$apt_log" 2>&1; then
            echo "install_zookeeper: '$*' failed:" >&2
            tail -n 20 "$apt_log" >&2
            exit 1
        fi
    }
    # Refresh the package lists only when they do not know the package yet.
    if ! apt-cache policy zookeeper 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        run_apt apt-get update -qq
    fi
    run_apt apt-get install -y -qq zookeeper
    echo "install_zookeeper: installed Debian package zookeeper $(dpkg-query -W -f='${Version}' zookeeper) via apt-get"
    exit 0
fi

install_mvn
