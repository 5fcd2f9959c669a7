"""A real OTLP metrics receiver on loopback, for tests: the OpenTelemetry Collector cannot be installed here, so this
decodes what exporters send with the official ``opentelemetry-proto`` messages — OTLP/HTTP protobuf and JSON on
``POST /v1/metrics`` and OTLP/gRPC's ``MetricsService/Export`` — and keeps every data point."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

CUMULATIVE, DELTA = 2, 1


@dataclass(frozen=True)
class Point:
    metric: str
    kind: str
    """``sum``, ``gauge`` or ``histogram``."""
    attributes: dict[str, str]
    value: float
    """A sum's or gauge's value; a histogram's count."""
    temporality: int | None
    resource: dict[str, str]
    unit: str
    time_unix_nano: int
    histogram_sum: float | None = None


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""


def _attrs(attributes: Any) -> dict[str, str]:
    return {a.key: _text(a.value) for a in attributes}


class OtlpReceiver:
    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: grpc.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        if self.protocol == "grpc":
            return f"http://127.0.0.1:{self.port}"
        return f"http://127.0.0.1:{self.port}/v1/metrics"

    def start(self, port: int = 0) -> OtlpReceiver:
        if self.protocol == "grpc":
            self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Servicer(self), self._grpc)
            self.port = self._grpc.add_insecure_port(f"127.0.0.1:{port}")
            self._grpc.start()
            return self
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                content_type = self.headers.get("Content-Type", "")
                if "json" in content_type:
                    json_format.Parse(body, request, ignore_unknown_fields=False)
                    answer = b"{}"
                else:
                    request.ParseFromString(body)
                    answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
                receiver.add(request, content_type)
                self.send_response(200)
                self.send_header("Content-Type", content_type or "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait()
            self._grpc = None

    def add(self, request: metrics_service_pb2.ExportMetricsServiceRequest, content_type: str) -> None:
        with self._lock:
            self.requests.append(request)
            self.content_types.append(content_type)

    def points(self) -> list[Point]:
        with self._lock:
            requests = list(self.requests)
        out: list[Point] = []
        for request in requests:
            for resource_metrics in request.resource_metrics:
                resource = _attrs(resource_metrics.resource.attributes)
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        data = getattr(metric, kind)
                        temporality = getattr(data, "aggregation_temporality", None)
                        for p in data.data_points:
                            if kind == "histogram":
                                value, total = float(p.count), p.sum
                            else:
                                value, total = (
                                    float(p.as_int if p.WhichOneof("value") == "as_int" else p.as_double),
                                    None,
                                )
                            out.append(
                                Point(
                                    metric.name,
                                    kind,
                                    _attrs(p.attributes),
                                    value,
                                    temporality,
                                    resource,
                                    metric.unit,
                                    p.time_unix_nano,
                                    total,
                                )
                            )
        return out

    def latest(self, metric: str, node: str) -> Point | None:
        """The newest point of `metric` for node `node` (its ``id`` tag)."""
        found = [p for p in self.points() if p.metric == metric and p.attributes.get("id") == node]
        return max(found, key=lambda p: p.time_unix_nano) if found else None


class _Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        self.receiver.add(request, "application/grpc")
        return metrics_service_pb2.ExportMetricsServiceResponse()
