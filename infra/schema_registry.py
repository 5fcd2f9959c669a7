#!/usr/bin/env python3
"""A small Schema Registry speaking the Confluent REST API, for local development and tests.

No schema-registry server can be installed on the development machines, so infra/services runs this one.
The engine does not depend on it: it talks to any Confluent-compatible registry. What it implements:
subjects and versions (register, lookup, latest, by version, delete), schemas by id (with their subjects
and versions), and ``/config`` (compatibility is reported as NONE: this registry does not enforce it).
State is one JSON file, rewritten atomically on every change.

    python3 infra/schema_registry.py --port 18081 --data DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def canonical(schema: str, schema_type: str) -> str:
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return schema
    return schema


class Store:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        data = json.loads(path.read_text()) if path.exists() else {}
        self.schemas: dict[str, dict] = data.get("schemas", {})  # id -> {schema, schemaType}
        self.subjects: dict[str, list[dict]] = data.get("subjects", {})  # subject -> [{version, id}]
        self.next_id = int(data.get("next_id", 1))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schemas": self.schemas, "subjects": self.subjects, "next_id": self.next_id}))
        os.replace(tmp, self.path)

    def find_id(self, schema: str, schema_type: str) -> int | None:
        key = canonical(schema, schema_type)
        for sid, entry in self.schemas.items():
            if entry["schemaType"] == schema_type and canonical(entry["schema"], schema_type) == key:
                return int(sid)
        return None

    def register(self, subject: str, schema: str, schema_type: str) -> dict:
        with self.lock:
            sid = self.find_id(schema, schema_type)
            versions = self.subjects.setdefault(subject, [])
            for v in versions:
                if v["id"] == sid:
                    return {"id": sid, "version": v["version"]}
            if sid is None:
                sid = self.next_id
                self.next_id += 1
                self.schemas[str(sid)] = {"schema": schema, "schemaType": schema_type}
            version = (versions[-1]["version"] + 1) if versions else 1
            versions.append({"version": version, "id": sid})
            self.save()
            return {"id": sid, "version": version}

    def entry(self, subject: str, v: dict) -> dict:
        schema = self.schemas[str(v["id"])]
        out = {"subject": subject, "version": v["version"], "id": v["id"], "schema": schema["schema"]}
        if schema["schemaType"] != "AVRO":
            out["schemaType"] = schema["schemaType"]
        return out


class Handler(BaseHTTPRequestHandler):
    store: Store
    server_version = "streamling-local-registry/1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet: tests read the engine's logs
        pass

    def reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, code: int, message: str) -> None:
        self.reply(status, {"error_code": code, "message": message})

    def body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def route(self, method: str) -> None:
        path = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/") if p]
        store = self.store
        try:
            if path == ["subjects"] and method == "GET":
                return self.reply(200, sorted(store.subjects))
            if path in (["config"], ["mode"]) and method == "GET":
                return self.reply(200, {"compatibilityLevel": "NONE"} if path == ["config"] else {"mode": "READWRITE"})
            if len(path) >= 2 and path[0] == "schemas" and path[1] == "ids":
                return self.schema_by_id(path, method)
            if len(path) >= 2 and path[0] == "subjects":
                return self.subject(path[1], path[2:], method)
            if len(path) >= 2 and path[0] == "config" and method == "GET":
                return self.reply(200, {"compatibilityLevel": "NONE"})
        except (ValueError, KeyError) as exc:
            return self.error(422, 42201, f"invalid request: {exc}")
        return self.error(404, 404, "not found")

    def schema_by_id(self, path: list[str], method: str) -> None:
        if method != "GET" or len(path) < 3 or not path[2].isdigit():
            return self.error(404, 404, "not found")
        sid = int(path[2])
        schema = self.store.schemas.get(str(sid))
        if schema is None:
            return self.error(404, 40403, "Schema not found")
        uses = [(s, v) for s, vs in self.store.subjects.items() for v in vs if v["id"] == sid]
        if len(path) == 3:
            out = {"schema": schema["schema"]}
            if schema["schemaType"] != "AVRO":
                out["schemaType"] = schema["schemaType"]
            return self.reply(200, out)
        if path[3:] == ["versions"]:
            return self.reply(200, [{"subject": s, "version": v["version"]} for s, v in uses])
        if path[3:] == ["subjects"]:
            return self.reply(200, sorted({s for s, _ in uses}))
        return self.error(404, 404, "not found")

    def subject(self, subject: str, rest: list[str], method: str) -> None:
        store = self.store
        versions = store.subjects.get(subject)
        if rest == ["versions"] and method == "POST":
            body = self.body()
            if not isinstance(body.get("schema"), str):
                return self.error(422, 42201, "Invalid schema")
            return self.reply(200, store.register(subject, body["schema"], body.get("schemaType", "AVRO")))
        if not versions:
            return self.error(404, 40401, f"Subject '{subject}' not found.")
        if rest == [] and method == "POST":
            body = self.body()
            sid = store.find_id(body.get("schema", ""), body.get("schemaType", "AVRO"))
            for v in versions:
                if v["id"] == sid:
                    return self.reply(200, store.entry(subject, v))
            return self.error(404, 40403, "Schema not found")
        if rest == [] and method == "DELETE":
            with store.lock:
                removed = [v["version"] for v in store.subjects.pop(subject)]
                store.save()
            return self.reply(200, removed)
        if rest == ["versions"] and method == "GET":
            return self.reply(200, [v["version"] for v in versions])
        if len(rest) == 2 and rest[0] == "versions" and method == "GET":
            wanted = rest[1]
            if wanted in ("latest", "-1"):
                return self.reply(200, store.entry(subject, versions[-1]))
            if not re.fullmatch(r"\d+", wanted):
                return self.error(422, 42202, "Invalid version")
            for v in versions:
                if v["version"] == int(wanted):
                    return self.reply(200, store.entry(subject, v))
            return self.error(404, 40402, "Version not found.")
        return self.error(404, 404, "not found")

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_DELETE(self) -> None:
        self.route("DELETE")

    def do_PUT(self) -> None:
        self.error(HTTPStatus.UNPROCESSABLE_ENTITY, 42203, "this local registry does not change compatibility")


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--host", default="127.0.0.1")
    args.add_argument("--port", type=int, default=18081)
    args.add_argument("--data", type=Path, required=True)
    opts = args.parse_args()
    opts.data.mkdir(parents=True, exist_ok=True)
    Handler.store = Store(opts.data / "registry.json")
    server = ThreadingHTTPServer((opts.host, opts.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
