"""A Hub stand-in on 127.0.0.1 that answers the endpoints huggingface_hub calls to commit and to download files.

Commits: repo info at a revision, paths-info, preupload (every file "regular", so bytes arrive inline), commit
(NDJSON; honours parentCommit with 412 and create_pr with refs/pr/N), repo creation. Downloads (`snapshot_download`,
`hf_hub_download`): repo info at a revision (sha and siblings of that revision), the recursive tree listing, and
HEAD/GET `/{repo_id}/resolve/{revision}/{path}` with the headers huggingface_hub reads (X-Repo-Commit, ETag = the
git blob id, Content-Length). A repo has named revisions ("main" the default, `FakeHub.add_revision` adds more); a
revision is given by name or by its commit sha. Tokens are checked against `valid_tokens`; an unknown repo answers
404 with X-Error-Code RepoNotFound, an unknown revision RevisionNotFound, a missing file EntryNotFound, as the Hub
does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse


class Repo:
    """A repo's revisions, name -> (commit sha, files). `files` and `sha` are those of "main", the default."""

    def __init__(
        self, files: dict[str, bytes] | None = None, sha: str = "0" * 40, private: bool = False, prs: int = 0
    ) -> None:
        self.revisions: dict[str, tuple[str, dict[str, bytes]]] = {"main": (sha, dict(files or {}))}
        self.private = private
        self.prs = prs

    @property
    def files(self) -> dict[str, bytes]:
        return self.revisions["main"][1]

    @files.setter
    def files(self, files: dict[str, bytes]) -> None:
        self.revisions["main"] = (self.sha, files)

    @property
    def sha(self) -> str:
        return self.revisions["main"][0]

    @sha.setter
    def sha(self, sha: str) -> None:
        self.revisions["main"] = (sha, self.files)

    def at(self, revision: str | None) -> tuple[str, dict[str, bytes]] | None:
        """(sha, files) of a revision given by name or by commit sha (None is "main"); None when there is none."""
        revision = revision or "main"
        if revision in self.revisions:
            return self.revisions[revision]
        return next((rev for rev in self.revisions.values() if rev[0] == revision), None)

    def name_of(self, revision: str) -> str | None:
        """The name of a revision given by name or by commit sha."""
        if revision in self.revisions:
            return revision
        return next((name for name, rev in self.revisions.items() if rev[0] == revision), None)


def blob_id(data: bytes) -> str:
    """The git blob id of a file: what the Hub answers as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


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
        # Every HEAD/GET of a file: (repo_id, revision as asked, path, Authorization header).
        self.downloads: list[tuple[str, str, str, str | None]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
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

    def add_revision(self, repo_id: str, revision: str, files: dict[str, bytes]) -> str:
        """Set the files of `revision` (a branch or tag name; "main" replaces the default) of `repo_id`, creating
        the repo when missing; return the revision's new commit sha."""
        repo = self.repos.get(repo_id) or self.add_repo(repo_id)
        digest = hashlib.sha1(repo_id.encode() + b"\0" + revision.encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + files[path])
        sha = digest.hexdigest()
        repo.revisions[revision] = (sha, dict(files))
        return sha

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

            def _revision(self, repo: Repo, revision: str) -> tuple[str, dict[str, bytes]] | None:
                found = repo.at(revision)
                if found is None:
                    self._send(404, {"error": f"Invalid rev id: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
                return found

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_HEAD(self) -> None:
                url = urlparse(self.path)
                hub.requests.append(("HEAD", url.path))
                if not self._auth():
                    return
                if "/resolve/" in url.path:
                    self.resolve(url.path, body=False)
                    return
                self._send(404, {"error": f"unexpected HEAD {url.path}"})

            def do_GET(self) -> None:
                url = urlparse(self.path)
                hub.requests.append(("GET", url.path))
                if not self._auth():
                    return
                parts = url.path.split("/")
                for verb in ("revision", "tree"):
                    if url.path.startswith("/api/models/") and verb in parts:
                        i = parts.index(verb)
                        repo_id = "/".join(parts[3:i])
                        repo = self._repo(repo_id)
                        if repo is None:
                            return
                        revision, *rest = [unquote(p) for p in parts[i + 1 :]] or ["main"]
                        found = self._revision(repo, revision)
                        if found is None:
                            return
                        sha, files = found
                        if verb == "revision":
                            self._send(
                                200,
                                {
                                    "id": repo_id,
                                    "sha": sha,
                                    "private": repo.private,
                                    "siblings": [{"rfilename": p} for p in sorted(files)],
                                },
                            )
                        else:
                            self.tree(files, "/".join(rest), parse_qs(url.query))
                        return
                if "/resolve/" in url.path:
                    self.resolve(url.path, body=True)
                    return
                self._send(404, {"error": f"unexpected GET {url.path}"})

            def tree(self, files: dict[str, bytes], under: str, params: dict[str, list[str]]) -> None:
                """The tree listing at `under`: every file below it when recursive, else its files and folders."""
                recursive = params.get("recursive", ["False"])[0].lower() in ("1", "true")
                prefix = f"{under.strip('/')}/" if under.strip("/") else ""
                out: list[dict[str, Any]] = []
                folders: set[str] = set()
                for path in sorted(files):
                    if not path.startswith(prefix):
                        continue
                    rest = path[len(prefix) :]
                    if not recursive and "/" in rest:
                        folders.add(prefix + rest.split("/")[0])
                        continue
                    if recursive:  # the Hub lists the folders on the way too
                        parts = rest.split("/")[:-1]
                        folders.update(prefix + "/".join(parts[:n]) for n in range(1, len(parts) + 1))
                    out.append({"type": "file", "path": path, "size": len(files[path]), "oid": blob_id(files[path])})
                out += [
                    {"type": "directory", "path": f, "oid": hashlib.sha1(f.encode()).hexdigest()}
                    for f in sorted(folders)
                ]
                if prefix and not out:
                    self._send(404, {"error": f"{under} does not exist"}, {"X-Error-Code": "EntryNotFound"})
                    return
                self._send(200, out)

            def resolve(self, path: str, body: bool) -> None:
                """HEAD/GET /{repo_id}/resolve/{revision}/{path}: the bytes of that file at that revision."""
                parts = path.lstrip("/").split("/")
                i = parts.index("resolve")
                if i < 1 or len(parts) < i + 3:
                    self._send(404, {"error": f"unexpected {path}"})
                    return
                repo_id, revision = "/".join(parts[:i]), unquote(parts[i + 1])
                filename = unquote("/".join(parts[i + 2 :]))
                repo = self._repo(repo_id)
                if repo is None:
                    return
                found = self._revision(repo, revision)
                if found is None:
                    return
                sha, files = found
                hub.downloads.append((repo_id, revision, filename, self.headers.get("authorization")))
                if filename not in files:
                    self._send(
                        404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": sha}
                    )
                    return
                data = files[filename]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Repo-Commit", sha)
                self.send_header("ETag", f'"{blob_id(data)}"')
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if body:
                    self.wfile.write(data)

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
                        repo_id, revision = "/".join(parts[3:i]), unquote("/".join(parts[i + 1 :]))
                        repo = self._repo(repo_id)
                        if repo is None:
                            return
                        getattr(self, verb.replace("-", "_"))(repo, repo_id, revision, body, params)
                        return
                self._send(404, {"error": f"unexpected POST {url.path}"})

            def paths_info(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                found = self._revision(repo, revision)
                if found is None:
                    return
                files = found[1]
                form = parse_qs(body.decode())
                paths = form.get("paths", [])
                out = []
                for path in paths:
                    if path in files:
                        data = files[path]
                        out.append({"type": "file", "path": path, "size": len(data), "oid": blob_id(data)})
                self._send(200, out)

            def preupload(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                files = json.loads(body)["files"]
                self._send(
                    200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                )

            def commit(self, repo: Repo, repo_id: str, revision: str, body: bytes, params: Any) -> None:
                lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                header = next(x["value"] for x in lines if x["key"] == "header")
                files = {
                    x["value"]["path"]: base64.b64decode(x["value"]["content"]) for x in lines if x["key"] == "file"
                }
                name = repo.name_of(revision)
                if name is None:
                    self._send(404, {"error": f"Invalid rev id: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
                    return
                sha, current = repo.revisions[name]
                parent = header.get("parentCommit")
                if parent is not None and parent != sha:
                    self._send(412, {"error": "A commit has happened since. Please refresh and try again."})
                    return
                create_pr = params.get("create_pr") == ["1"]
                hub.commits.append(
                    Commit(repo_id, revision, create_pr, header, files, self.headers.get("authorization"))
                )
                oid = hashlib.sha1(body).hexdigest()
                response = {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid}
                if create_pr:
                    repo.prs += 1
                    response["pullRequestUrl"] = f"{hub.endpoint}/{repo_id}/discussions/{repo.prs}"
                else:
                    repo.revisions[name] = (oid, {**current, **files})
                self._send(200, response)

        return Handler
