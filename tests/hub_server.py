"""A Hub stand-in on 127.0.0.1 that answers the endpoints huggingface_hub calls to commit files, and records them.

Endpoints: repo info at a revision, paths-info, preupload (every file "regular", so bytes arrive inline), commit
(NDJSON; honours parentCommit with 412 and create_pr with refs/pr/N), repo creation. Tokens are checked against
`valid_tokens`; an unknown repo answers 404 with X-Error-Code RepoNotFound, as the Hub does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    files: dict[str, bytes] = field(default_factory=dict)
    sha: str = "0" * 40
    private: bool = False
    prs: int = 0


@dataclass
class Commit:
    repo_id: str
    revision: str
    create_pr: bool
    header: dict[str, Any]
    files: dict[str, bytes]
    authorization: str | None


class FakeHub:
    def __init__(self, valid_tokens: tuple[str, ...] = ("hf_good",)) -> None:
        self.repos: dict[str, Repo] = {}
        self.valid_tokens = set(valid_tokens)
        self.commits: list[Commit] = []
        self.requests: list[tuple[str, str]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None) -> Repo:
        repo = Repo(files=dict(files or {}))
        repo.sha = hashlib.sha1(repo_id.encode() + b"initial").hexdigest()
        self.repos[repo_id] = repo
        return repo

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _auth(self) -> bool:
                auth = self.headers.get("authorization")
                if auth is None or auth.removeprefix("Bearer ") in hub.valid_tokens:
                    return True
                self._send(401, {"error": "Invalid credentials in Authorization header"})
                return False

            def _repo(self, repo_id: str) -> Repo | None:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return repo

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self) -> None:
                url = urlparse(self.path)
                hub.requests.append(("GET", url.path))
                if not self._auth():
                    return
                parts = url.path.split("/")
                if url.path.startswith("/api/models/") and "revision" in parts:
                    i = parts.index("revision")
                    repo_id = "/".join(parts[3:i])
                    repo = self._repo(repo_id)
                    if repo is None:
                        return
                    self._send(200, {"id": repo_id, "sha": repo.sha, "private": repo.private,
                                     "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
                    return
                self._send(404, {"error": f"unexpected GET {url.path}"})

            def do_POST(self) -> None:
                url = urlparse(self.path)
                params = parse_qs(url.query)
                hub.requests.append(("POST", url.path))
                body = self._body()
                if not self._auth():
                    return
                if url.path == "/api/repos/create":
                    payload = json.loads(body)
                    repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
                    repo = hub.repos.get(repo_id) or hub.add_repo(repo_id, {".gitattributes": b"*.json text\n"})
                    repo.private = payload.get("visibility") == "private" or bool(payload.get("private"))
                    self._send(200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})
                    return
                parts = url.path.split("/")
                for verb in ("paths-info", "preupload", "commit"):
                    if url.path.startswith("/api/models/") and verb in parts:
                        i = parts.index(verb)
                        repo_id, revision = "/".join(parts[3:i]), unquote("/".join(parts[i + 1:]))
                        repo = self._repo(repo_id)
                        if repo is None:
                            return
                        getattr(self, verb.replace("-", "_"))(repo, repo_id, revision, body, params)
                        return
                self._send(404, {"error": f"unexpected POST {url.path}"})

            def paths_info(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                form = parse_qs(body.decode())
                paths = form.get("paths", [])
                out = []
                for path in paths:
                    if path in repo.files:
                        data = repo.files[path]
                        out.append({"type": "file", "path": path, "size": len(data),
                                    "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()})
                self._send(200, out)

            def preupload(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                files = json.loads(body)["files"]
                self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                           for f in files]})

            def commit(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                header = next(x["value"] for x in lines if x["key"] == "header")
                files = {x["value"]["path"]: base64.b64decode(x["value"]["content"])
                         for x in lines if x["key"] == "file"}
                parent = header.get("parentCommit")
                if parent is not None and parent != repo.sha:
                    self._send(412, {"error": "A commit has happened since. Please refresh and try again."})
                    return
                create_pr = params.get("create_pr") == ["1"]
                hub.commits.append(Commit(repo_id, revision, create_pr, header, files,
                                          self.headers.get("authorization")))
                oid = hashlib.sha1(body).hexdigest()
                response = {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid}
                if create_pr:
                    repo.prs += 1
                    response["pullRequestUrl"] = f"{hub.endpoint}/{repo_id}/discussions/{repo.prs}"
                else:
                    repo.files.update(files)
                    repo.sha = oid
                self._send(200, response)

        return Handler
