#!/usr/bin/env bash
# Fetch Apache Kafka (broker + perf tools) and Spark's Kafka connector from Maven Central for the
# side-by-side benchmarks (`sparklog bench SCENARIO --against kafka`, docs/benchmarks.md).
#
#   .deps/kafka/        kafka_2.13 + kafka-tools (KRaft broker, StorageTool, Producer/ConsumerPerformance)
#   .deps/spark-kafka/  spark-sql-kafka-0-10_2.13 and what pyspark's own jars do not already provide
#
# Idempotent: a folder counts as fetched when it holds the sha256 of the pom it was filled from.
# Usage: benchmarks/fetch_kafka.sh [kafka|spark|all]   (default: all)
# Prints one line per folder saying what it did.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH="$ROOT/benchmarks"
SETTINGS="$BENCH/maven-settings.xml"
WHAT="${1:-all}"

command -v mvn >/dev/null || { echo "fetch_kafka: mvn not found" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch_kafka: java not found (Kafka 4.x needs Java >= 17)" >&2; exit 1; }

# fetch NAME POM [extra mvn args...]
fetch() {
    local name="$1" pom="$2"
    shift 2
    local dest="$ROOT/.deps/$name"
    local hash
    hash="$(cat "$pom" "$SETTINGS" | sha256sum | cut -d' ' -f1)"
    if [[ -f "$dest/.pom.sha256" && "$(cat "$dest/.pom.sha256")" == "$hash" ]]; then
        echo "fetch_kafka: $name already present in $dest"
        return 0
    fi
    local tmp="$dest.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! mvn -q -B -s "$SETTINGS" -f "$pom" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$tmp" "$@" >"$tmp.log" 2>&1; then
        echo "fetch_kafka: mvn failed for $name, see $tmp.log" >&2
        tail -n 20 "$tmp.log" >&2
        rm -rf "$tmp"
        exit 1
    fi
    rm -f "$tmp.log"
    echo "$hash" >"$tmp/.pom.sha256"
    rm -rf "$dest"
    mv "$tmp" "$dest"
    echo "fetch_kafka: fetched $(ls "$dest"/*.jar | wc -l) jars into $dest"
}

case "$WHAT" in
    kafka|all) fetch kafka "$BENCH/kafka-pom.xml" ;;&
    spark|all)
        # Spark, Scala, Hadoop, lz4, snappy and slf4j come with pyspark: only the connector's own jars.
        fetch spark-kafka "$BENCH/spark-kafka-pom.xml" \
            -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
        ;;
    kafka) ;;
    *) echo "usage: $0 [kafka|spark|all]" >&2; exit 2 ;;
esac
