#!/usr/bin/env bash
# Fetch the Delta Lake jars for Spark into .deps/delta/ (idempotent; fast when already there).
# Spark's own Ivy resolution (configure_spark_with_delta_pip) cannot reach Maven Central from every
# machine, Maven can: sparklog.spark_session passes these jars with spark.jars.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps/delta"
POM="$ROOT/scripts/delta-pom.xml"
stamp="$(sha256sum "$POM" | cut -d' ' -f1)"
if compgen -G "$DEPS/delta-spark_*.jar" >/dev/null && [[ "$(cat "$DEPS/.pom.sha256" 2>/dev/null)" == "$stamp" ]]; then
    echo "install_delta: already present in $DEPS"
    exit 0
fi
command -v mvn >/dev/null || { echo "install_delta: mvn not found (needed to fetch the Delta jars)" >&2; exit 1; }
tmp="$DEPS.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
if ! mvn -q -B -f "$POM" dependency:copy-dependencies -DincludeScope=runtime -DincludeGroupIds=io.delta -DincludeArtifactIds=delta-spark_4.2_2.13,delta-storage -DoutputDirectory="$tmp" >"$tmp.log" 2>&1; then
    echo "install_delta: mvn failed, see $tmp.log" >&2
    tail -n 20 "$tmp.log" >&2
    rm -rf "$tmp"
    exit 1
fi
rm -f "$tmp.log"
echo "$stamp" >"$tmp/.pom.sha256"
rm -rf "$DEPS"
mv "$tmp" "$DEPS"
echo "install_delta: fetched $(ls "$DEPS"/*.jar | wc -l) jars into $DEPS"
