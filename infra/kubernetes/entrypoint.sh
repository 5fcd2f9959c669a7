#!/usr/bin/env bash
# The executor pod's command. Spark's Kubernetes backend starts executor pods with the argument `executor` and
# describes the executor in SPARK_* variables; this turns them into the JVM's command line
# (org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend), as Spark's own image entrypoint does.
set -euo pipefail

case "${1:-}" in
  executor)
    java_opts=()
    while IFS='=' read -r name value; do
      java_opts+=("$value")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n)
    exec "${JAVA_HOME}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_HOME}/jars/*:${SPARK_CLASSPATH:-}:${SPARK_EXTRA_CLASSPATH:-}" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" \
      --executor-id "${SPARK_EXECUTOR_ID}" \
      --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" \
      --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" \
      --podName "${SPARK_EXECUTOR_POD_NAME}"
    ;;
  *)
    exec "$@"
    ;;
esac
