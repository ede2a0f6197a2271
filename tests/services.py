"""Real PostgreSQL and nginx on loopback for the tests (and the store benchmark).

Each runs from a fresh temporary directory: a PostgreSQL cluster made by ``initdb``,
an nginx with a generated configuration. As root, PostgreSQL runs as the ``postgres``
user Debian's package creates (it refuses to run as root). ``.ci/install-services.sh``
installs both from Debian.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.server import free_port

NGINX_CONFIG = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 16m;
    client_body_buffer_size 16m;  # bodies stay in memory: no temp files for workers to write
    upstream replicas {{
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


class ServiceUnavailable(Exception):
    """A service the tests need cannot start here; the message says why."""


def _run(command: list[str], user: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)


def postgres_bin() -> Path:
    """The directory of PostgreSQL's server programs (Debian keeps them off ``PATH``)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version, reverse=True)
    initdb = Path(found[0]) if found else shutil.which("initdb")
    if not initdb:
        raise ServiceUnavailable(
            "PostgreSQL is not installed (no initdb): run .ci/install-services.sh "
            "(apt-get install postgresql nginx)"
        )
    return Path(initdb).parent


def _version(path: str) -> float:
    try:
        return float(Path(path).parts[-3])
    except ValueError:
        return 0.0


@dataclass
class Postgres:
    """A PostgreSQL server of its own data directory, on a loopback port."""

    bin: Path
    data: Path
    port: int
    user: str | None  # the system user it runs as (None: this one)

    @property
    def url(self) -> str:
        """The URL of its ``postgres`` database, as the ``mellea`` superuser."""
        return f"postgresql://mellea@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        """The URL of database ``name``."""
        return f"postgresql://mellea@127.0.0.1:{self.port}/{name}"

    def pg_ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on the cluster; raises with its output if it fails."""
        result = _run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args], self.user)
        if result.returncode != 0:
            raise ServiceUnavailable(f"pg_ctl {' '.join(args)} failed: {result.stderr.strip()}")

    def start(self) -> None:
        """Start the server and wait until it takes connections."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"
        self.pg_ctl("-o", options, "-l", str(self.data / "server.log"), "-w", "start")

    def stop(self) -> None:
        """Stop the server (fast: open sessions are cut, nothing committed is lost)."""
        self.pg_ctl("-m", "fast", "-w", "stop")

    def create_database(self, name: str) -> str:
        """A new, empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)


@contextmanager
def postgres(durable: bool = False) -> Iterator[Postgres]:
    """A fresh PostgreSQL cluster on a free loopback port, removed afterwards.

    Unless ``durable``, commits do not wait for the disk (``fsync=off``): the tests
    crash servers of ours, never the database's machine.
    """
    bin_dir = postgres_bin()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise ServiceUnavailable(
                "PostgreSQL refuses to run as root and there is no 'postgres' user"
            ) from None
        user = "postgres"
    # Another user must reach the directory: /tmp, not a TMPDIR under root's home.
    base = Path(tempfile.mkdtemp(prefix="mellea-pg-", dir="/tmp" if user else None))
    data = base / "data"
    if user is not None:
        shutil.chown(base, user)
    result = _run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "mellea", "--auth=trust", "-E", "UTF8"]
        + ([] if durable else ["--no-sync"]),
        user,
    )
    if result.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise ServiceUnavailable(f"initdb failed: {result.stderr.strip()}")
    config = "\nmax_connections = 200\nshared_buffers = 64MB\n"
    if not durable:
        config += "fsync = off\n"
    with open(data / "postgresql.conf", "a") as file:
        file.write(config)
    server = Postgres(bin_dir, data, free_port(), user)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        except ServiceUnavailable:
            pass
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Nginx:
    """An nginx proxying a loopback port round robin to server replicas."""

    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def base_url(self) -> str:
        """Where clients reach the replicas."""
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def nginx(upstream_ports: list[int]) -> Iterator[Nginx]:
    """nginx in front of ``upstream_ports`` (round robin, ``proxy_buffering off``)."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        raise ServiceUnavailable(
            "nginx is not installed: run .ci/install-services.sh (apt-get install nginx)"
        )
    directory = Path(tempfile.mkdtemp(prefix="mellea-nginx-"))
    port = free_port()
    servers = "\n".join(f"        server 127.0.0.1:{p};" for p in upstream_ports)
    config = directory / "nginx.conf"
    config.write_text(NGINX_CONFIG.format(dir=directory, servers=servers, port=port))
    process = subprocess.Popen(
        [binary, "-e", "stderr", "-c", str(config), "-p", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=open(directory / "stderr.log", "wb"),  # noqa: SIM115 (nginx keeps it open)
    )
    try:
        _wait_for_port(port, process, directory / "stderr.log")
        yield Nginx(process, port, directory)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServiceUnavailable(f"nginx exited: {log.read_text(errors='replace').strip()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise ServiceUnavailable("nginx did not listen within 15 s")
