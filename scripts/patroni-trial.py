#!/usr/bin/env python3
"""The load generator, receiver and checker of scripts/patroni-trial (run by hand, not by CI).

Python 3 standard library only. Everything it talks to is on 127.0.0.1: the spoold hosts, the
Patroni REST APIs, the PostgreSQL servers (through psql) and its own receiver.

    patroni-trial.py wait-cluster --node NAME,REST_URL,PG_PORT,DATA_DIR ... [--timeout 120]
        exit 0 once one node is leader and another streams from it as its synchronous standby;
        prints the leader's name and PostgreSQL port.

    patroni-trial.py run --node ... --node ... --host URL --host URL --receiver-port PORT
                         --deploy-log FILE --host-log FILE ... --out DIR [--cycles 5] ...
        the trial: receiver, creates and tasks through the hosts, kill -9 of the leader's
        postmaster in cycles and one switchover, then the check; writes DIR/results.json and
        DIR/summary.md.

The bash script owns every process but this one and the ones this one starts in itself
(threads only): it kills them all, by pid, when it exits.
"""
import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A proxy named in the environment must never see this traffic: every request here is to
# loopback, and urllib would otherwise follow http_proxy.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

PSQL = "/usr/lib/postgresql/15/bin/psql"

DELIVERY_OPEN = {"pending", "in_flight"}
TASK_OPEN = {"pending", "running", "interrupted"}


def now():
    return time.monotonic()


def http(method, url, body=None, timeout=10.0):
    """(status, parsed body) — status None when no answer came (refused, reset, timed out)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with OPENER.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (OSError, urllib.error.URLError) as e:  # timeouts are OSErrors too
        return None, f"{type(e).__name__}: {e}"
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class Node:
    def __init__(self, spec):
        self.name, self.rest, port, self.data_dir = spec.split(",")
        self.port = int(port)


def psql(port, sql, timeout=5):
    env = dict(os.environ, PGCONNECT_TIMEOUT="2")
    try:
        p = subprocess.run([PSQL, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                            "-d", "postgres", "-XAtq", "-c", sql],
                           capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout if p.returncode == 0 else None


def cluster_view(nodes):
    """Patroni's GET /cluster from the first REST API that answers."""
    for n in nodes:
        status, body = http("GET", n.rest + "/cluster", timeout=2)
        if status == 200 and isinstance(body, dict):
            return body
    return None


def healthy(nodes):
    """(leader, standby) when Patroni names a running leader and a sync_standby, and the
    leader's own pg_stat_replication shows that standby streaming as `sync` — Patroni's view
    alone says nothing of whether the standby is connected yet."""
    view = cluster_view(nodes)
    if not view:
        return None
    by_role = collections.defaultdict(list)
    for m in view.get("members", []):
        by_role[m.get("role")].append(m)
    if len(by_role["leader"]) != 1 or len(by_role["sync_standby"]) != 1:
        return None
    leader, standby = by_role["leader"][0], by_role["sync_standby"][0]
    if leader.get("state") != "running" or standby.get("state") != "running":
        return None
    node = {n.name: n for n in nodes}[leader["name"]]
    out = psql(node.port, "select pg_is_in_recovery(), application_name, state, sync_state "
                          "from pg_stat_replication")
    if out is None:
        return None
    for line in out.splitlines():
        in_recovery, app, state, sync_state = line.split("|")
        if (in_recovery == "f" and app == standby["name"] and state == "streaming"
                and sync_state == "sync"):
            return leader["name"], standby["name"]
    return None


def leader_of(nodes):
    view = cluster_view(nodes)
    for m in (view or {}).get("members", []):
        if m.get("role") == "leader" and m.get("state") == "running":
            return m["name"]
    return None


def wait_for(predicate, timeout, interval=0.2):
    deadline = now() + timeout
    while now() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


# ---------------------------------------------------------------------------------------------
# Receiver


class Receiver:
    """Answers every request 200 after 150 ms, so that attempts are under way when a primary
    dies, and counts requests per X-Spoold-Delivery-ID."""

    def __init__(self, port):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.times = collections.defaultdict(list)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                delivery = self.headers.get("X-Spoold-Delivery-ID", "")
                with receiver.lock:
                    receiver.counts[delivery] += 1
                    receiver.times[delivery].append(round(time.time(), 3))
                time.sleep(0.15)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


# ---------------------------------------------------------------------------------------------
# Load


class Load:
    def __init__(self, hosts, receiver_port, rate, give_up_after):
        self.hosts = hosts
        self.target = f"http://127.0.0.1:{receiver_port}/hook"
        self.rate = rate
        self.give_up_after = give_up_after
        self.lock = threading.Lock()
        self.stop_creating = threading.Event()
        self.stop_tasks = threading.Event()
        self.deliveries = {}  # key -> {id, mode, host, sent, acked}
        self.unacked = []  # keys given up on
        self.tasks = {}  # n -> {id, host, sent, acked}
        self.tasks_unacked = []
        # Every refused or failed try: (time, what, kind "create"/"task", key). Tries are sent
        # again every 100-200 ms per create, so the number of creates refused says more than
        # the number of tries.
        self.failures = []
        self.status_codes = collections.Counter()
        # One thread per create being sent, as independent clients would: an outage then
        # holds every create made during it, not only as many as a pool has workers.
        self.creating = 0
        self.task_threads = []
        self.threads = [threading.Thread(target=self._generate, daemon=True),
                        threading.Thread(target=self._submit_tasks, daemon=True)]

    def start(self):
        for t in self.threads:
            t.start()

    def _failure(self, kind, key, status, body):
        if status is None:
            what = "no answer"
        elif isinstance(body, dict) and isinstance(body.get("error"), dict):
            what = f"{status} {body['error'].get('code')}"
        else:
            what = str(status)
        with self.lock:
            self.failures.append((now(), what, kind, key))

    def _send_until_acknowledged(self, kind, key, url, payload):
        """Send one create again with the same idempotency key (or the same task: the type's
        idempotency_key) until 201/200; (sent, acked, body) of the try that was answered."""
        first, tries = now(), 0
        while now() - first < self.give_up_after:
            sent = now()
            status, body = http("POST", url, payload, timeout=15)
            with self.lock:
                self.status_codes[f"{kind} {status}"] += 1
            if status in (200, 201) and isinstance(body, dict) and body.get("id"):
                return sent, now(), body
            self._failure(kind, key, status, body)
            # Backing off (100 ms doubling to 1 s) keeps hundreds of waiting clients from
            # flooding two hosts on two CPUs; new creates still arrive at the full rate, so the
            # first one after an outage is sent as soon as it comes.
            time.sleep(min(1.0, 0.1 * 2 ** tries))
            tries += 1
        return None

    def _generate(self):
        i, start = 0, now()
        while not self.stop_creating.is_set():
            i += 1
            mode = "at_most_once" if i % 10 == 0 else "at_least_once"
            with self.lock:
                self.creating += 1
            threading.Thread(target=self._create, args=(i, mode, self.hosts[i % len(self.hosts)]),
                             daemon=True).start()
            delay = start + i / self.rate - now()
            if delay > 0:
                time.sleep(delay)

    def _create(self, i, mode, host):
        key = f"trial-{i}"
        done = self._send_until_acknowledged("create", key, host + "/v1/deliveries", {
            "targetUrl": self.target, "idempotencyKey": key, "mode": mode, "body": {"n": i}})
        with self.lock:
            if done:
                sent, acked, body = done
                self.deliveries[key] = {"id": body["id"], "mode": mode, "host": host,
                                        "sent": sent, "acked": acked}
            else:
                self.unacked.append(key)
            self.creating -= 1

    def _submit_tasks(self):
        n = 0
        while not self.stop_tasks.is_set():
            n += 1
            t = threading.Thread(target=self._task, args=(n, self.hosts[n % len(self.hosts)]),
                                 daemon=True)
            t.start()
            self.task_threads.append(t)
            self.stop_tasks.wait(random.uniform(1.0, 2.0))

    def _task(self, n, host):
        done = self._send_until_acknowledged("task", n, host + "/v1/tasks",
                                             {"type": "deploy", "params": {"n": str(n)}})
        with self.lock:
            if done:
                sent, acked, body = done
                self.tasks[n] = {"id": body["id"], "host": host, "sent": sent, "acked": acked}
            else:
                self.tasks_unacked.append(n)

    def drain(self, timeout):
        """Stop new work, then wait for the creates and tasks still being sent again."""
        self.stop_creating.set()
        self.stop_tasks.set()
        deadline = now() + timeout
        while now() < deadline:
            with self.lock:
                idle = self.creating == 0
            if idle and not any(t.is_alive() for t in self.task_threads):
                return True
            time.sleep(0.2)
        return False

    def first_ack_after(self, t):
        """The first create acknowledged on a try sent at or after t (a try sent before the
        kill may still have committed in time: it says nothing of the new primary)."""
        with self.lock:
            acks = [d["acked"] for d in self.deliveries.values() if d["sent"] >= t]
        return min(acks) if acks else None


# ---------------------------------------------------------------------------------------------
# Cycles


def kill_postmaster(node):
    with open(os.path.join(node.data_dir, "postmaster.pid")) as f:
        pid = int(f.readline())
    # Only the postmaster of this node's data directory, never whatever reused the pid.
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    if node.data_dir not in cmdline:
        raise RuntimeError(f"pid {pid} of {node.name} is not its postmaster: {cmdline}")
    os.kill(pid, signal.SIGKILL)
    return pid


def run_cycle(kind, nodes, load, rejoin_timeout, log):
    """One kill -9 of the leader's postmaster (kind "kill") or one planned switchover; returns
    what was measured. Waits for the other node to lead and the old one to stream again as its
    synchronous standby."""
    by_name = {n.name: n for n in nodes}
    before = healthy(nodes)
    if not before:
        raise RuntimeError("the cluster is not healthy before the cycle")
    old, new = before
    rec = {"kind": kind, "old_leader": old, "expected_leader": new}
    t0 = now()
    rec["wall_time"] = time.strftime("%H:%M:%S")
    if kind == "kill":
        rec["postmaster_pid"] = kill_postmaster(by_name[old])
        log(f"cycle: kill -9 of {old}'s postmaster (pid {rec['postmaster_pid']})")
    else:
        status, body = http("POST", by_name[old].rest + "/switchover",
                            {"leader": old, "candidate": new}, timeout=30)
        rec["switchover_answer"] = f"{status} {body}".strip()
        log(f"cycle: switchover {old} -> {new}: {rec['switchover_answer']}")
    rec["t0"] = t0

    promoted = wait_for(lambda: leader_of(nodes) == new
                        and psql(by_name[new].port, "select pg_is_in_recovery()") == "f\n",
                        timeout=60)
    rec["promoted_after_s"] = round(now() - t0, 2) if promoted else None
    rec["leader_after"] = leader_of(nodes)

    back = wait_for(lambda: healthy(nodes) == (new, old), timeout=rejoin_timeout, interval=0.5)
    if back:
        rec["rejoined_after_s"] = round(now() - t0, 2)
        rec["rejoined_by_itself"] = True
    else:
        rec["rejoined_by_itself"] = False
        # Not within the limit: give Patroni longer so that the trial can go on, and say so.
        log(f"cycle: {old} has not rejoined as sync standby within {rejoin_timeout} s")
        late = wait_for(lambda: healthy(nodes), timeout=120, interval=1)
        rec["rejoined_after_s"] = round(now() - t0, 2) if late else None
        rec["healthy_after_extra_wait"] = late
    rec["first_ack_after_s"] = None
    first = wait_for(lambda: load.first_ack_after(t0), timeout=60)
    if first:
        rec["first_ack_after_s"] = round(first - t0, 2)
    log(f"cycle: {kind}: promoted after {rec['promoted_after_s']} s, first create "
        f"acknowledged after {rec['first_ack_after_s']} s, {old} streaming as sync standby "
        f"after {rec['rejoined_after_s']} s")
    return rec


# ---------------------------------------------------------------------------------------------
# Check


def final_states(hosts, kind, ids, open_states, timeout):
    """GET each record until it is in no open state (or the time is up): {id: body|None}."""
    results = {}
    pending = list(ids)
    deadline = now() + timeout
    lock = threading.Lock()

    def fetch(chunk, host):
        for rid in chunk:
            status, body = http("GET", f"{host}/v1/{kind}/{rid}", timeout=10)
            with lock:
                if status == 200 and isinstance(body, dict):
                    results[rid] = body
                elif status == 404:
                    results[rid] = None
                # Anything else (no answer, 503): asked again on the next round.

    while pending and now() < deadline:
        chunks = [pending[i::8] for i in range(8)]
        threads = [threading.Thread(target=fetch, args=(c, hosts[i % len(hosts)]))
                   for i, c in enumerate(chunks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pending = [rid for rid in pending
                   if rid not in results
                   or (results[rid] is not None and results[rid].get("status") in open_states)]
        if pending:
            time.sleep(1)
    return results, pending


def deploy_runs(path):
    """Each run of deploy.sh as [n, start_ns, end_ns|None], in the order they started."""
    runs, open_runs = [], collections.defaultdict(list)
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return runs
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        what, n, ts = parts[0], parts[1], int(parts[2])
        if what == "start":
            run = [n, ts, None]
            runs.append(run)
            open_runs[n].append(run)
        elif what == "end" and open_runs[n]:
            open_runs[n].pop(0)[2] = ts
    return runs


def lock_overlaps(runs):
    """Pairs of runs whose [start, end] intervals overlap: two holders of env:prod at once.
    A run with no end (its script killed) counts as lasting until the next start of the same
    task, or to the end of the log."""
    last = max((r[2] or r[1] for r in runs), default=0)
    intervals = []
    for r in runs:
        end = r[2]
        if end is None:
            later = [s[1] for s in runs if s[0] == r[0] and s[1] > r[1]]
            end = min(later) if later else last
        intervals.append((r[1], end, r[0]))
    intervals.sort()
    overlaps = []
    for i, (s1, e1, n1) in enumerate(intervals):
        for s2, e2, n2 in intervals[i + 1:]:
            if s2 >= e1:
                break
            overlaps.append({"a": n1, "b": n2, "overlap_ms": round((min(e1, e2) - s2) / 1e6, 1)})
    return overlaps


LOG_PHRASES = {
    "kept": "kept and recorded once it is back",
    "stale_primary": "stale primary",
    "startup_waiting": "start-up is waiting",
}


def scan_host_logs(paths):
    out = {}
    for path in paths:
        counts = collections.Counter()
        levels = collections.Counter()
        messages = collections.Counter()
        examples = collections.defaultdict(list)
        with open(path, errors="replace") as f:
            for line in f:
                for name, phrase in LOG_PHRASES.items():
                    if phrase in line:
                        counts[name] += 1
                        if len(examples[name]) < 3:
                            examples[name].append(line.strip()[:600])
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                level = str(rec.get("level", "?")).upper()
                levels[level] += 1
                if level in ("WARN", "WARNING", "ERROR"):
                    msg = rec.get("message") or (rec.get("fields") or {}).get("message") or "?"
                    messages[f"{level} {msg}"[:200]] += 1
        out[os.path.basename(path)] = {
            "phrases": {k: counts[k] for k in LOG_PHRASES},
            "levels": dict(levels),
            "warnings_and_errors": dict(messages.most_common(15)),
            "examples": dict(examples),
        }
    return out


def lines_naming(paths, needle, limit=25):
    found = []
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if needle in line:
                    found.append(f"{os.path.basename(path)}: {line.strip()[:800]}")
                    if len(found) >= limit:
                        return found
    return found


def check(args, load, receiver, cycles, t_start):
    hosts = args.host
    deliveries = load.deliveries
    tasks = load.tasks
    dstate, dpending = final_states(hosts, "deliveries", [d["id"] for d in deliveries.values()],
                                    DELIVERY_OPEN, args.final_timeout)
    tstate, tpending = final_states(hosts, "tasks", [t["id"] for t in tasks.values()],
                                    TASK_OPEN, args.final_timeout)
    time.sleep(1)  # an answer being sent as the last status was read
    with receiver.lock:
        counts = dict(receiver.counts)
        times = dict(receiver.times)

    by_mode = collections.defaultdict(lambda: collections.Counter())
    lost, twice, unknown, never_received = [], [], [], []
    for key, d in deliveries.items():
        body = dstate.get(d["id"])
        status = body.get("status") if body else ("404" if d["id"] in dstate else "not read")
        by_mode[d["mode"]][status] += 1
        received = counts.get(d["id"], 0)
        entry = {"key": key, "id": d["id"], "mode": d["mode"], "status": status,
                 "received": received, "attempts": body.get("attempts") if body else None}
        if status != "succeeded":
            lost.append(entry)
        if status == "unknown":
            unknown.append(entry)
        if received >= 2:
            entry["received_at"] = times.get(d["id"])
            twice.append(entry)
        if status == "succeeded" and received == 0:
            never_received.append(entry)
    stray = sorted(set(counts) - {d["id"] for d in deliveries.values()})

    task_status = collections.Counter()
    tasks_bad = []
    for n, t in sorted(tasks.items()):
        body = tstate.get(t["id"])
        status = body.get("status") if body else ("404" if t["id"] in tstate else "not read")
        task_status[status] += 1
        if status != "succeeded":
            tasks_bad.append({"n": n, "id": t["id"], "status": status,
                              "attempt": body.get("attempt") if body else None, "task": body})
    runs = deploy_runs(args.deploy_log)
    starts = collections.Counter(r[0] for r in runs)
    overlaps = lock_overlaps(runs)

    # Refused and failed tries in each cycle's window: from its kill or switchover to the first
    # create acknowledged after it, or to the rejoin when that came later.
    def refused(lo, hi):
        tries = [(what, kind, key) for t, what, kind, key in load.failures if lo <= t <= hi]
        creates = {key for what, kind, key in tries if kind == "create" and what.startswith("503")}
        other = collections.Counter(f"{kind}: {what}" for what, kind, _ in tries
                                    if not (kind == "create" and what.startswith("503")))
        tries_503 = sum(1 for what, kind, _ in tries if kind == "create" and what.startswith("503"))
        return len(creates), tries_503, dict(other)

    for c in cycles:
        if c["kind"] == "error":
            continue
        ends = [c["t0"] + x for x in (c.get("first_ack_after_s"), c.get("rejoined_after_s")) if x]
        hi = max(ends) if ends else now()
        c["creates_503_in_window"], c["tries_503_in_window"], c["other_failures_in_window"] = \
            refused(c["t0"], hi)
        # A switchover keeps the old primary writing for a moment: the gap that counts is the
        # one from the first refused try to the first create acknowledged on a try sent after it.
        # In strict synchronous mode a new primary with no standby yet holds every COMMIT:
        # creates answered late rather than refused.
        slow = [d["acked"] - d["sent"] for d in deliveries.values()
                if c["t0"] <= d["acked"] <= hi and d["acked"] - d["sent"] > 1]
        c["creates_acknowledged_late"] = len(slow)
        c["longest_acknowledgement_s"] = round(max(slow), 2) if slow else None
        first_fail = min((t for t, *_ in load.failures if c["t0"] <= t <= hi), default=None)
        c["write_gap_s"] = None
        if first_fail is not None:
            back = load.first_ack_after(first_fail)
            c["write_gap_s"] = round(back - first_fail, 2) if back else None
    creates_503, tries_503, _ = refused(0, now())
    all_failures = collections.Counter(f"{kind}: {what}" for _, what, kind, _ in load.failures)

    host_logs = scan_host_logs(args.host_log)
    suspects = {}
    for e in (lost + twice + unknown)[:20]:
        suspects[e["id"]] = lines_naming(args.host_log, e["id"])
    for e in tasks_bad[:20]:
        suspects[e["id"]] = lines_naming(args.host_log, e["id"])

    return {
        "duration_s": round(now() - t_start, 1),
        "creates_acknowledged": len(deliveries),
        "creates_acknowledged_by_mode": {m: sum(v.values()) for m, v in by_mode.items()},
        "creates_never_acknowledged": load.unacked,
        "deliveries_final_status_by_mode": {m: dict(v) for m, v in by_mode.items()},
        "deliveries_still_open_at_timeout": len(dpending),
        "lost": lost,
        "received_twice_or_more": {
            "at_most_once": [e for e in twice if e["mode"] == "at_most_once"],
            "at_least_once": [e for e in twice if e["mode"] == "at_least_once"],
        },
        "unknown": unknown,
        "succeeded_but_never_received": never_received,
        "received_ids_not_acknowledged": stray[:50],
        "receiver_requests": sum(counts.values()),
        "tasks_acknowledged": len(tasks),
        "tasks_never_acknowledged": load.tasks_unacked,
        "tasks_final_status": dict(task_status),
        "tasks_still_open_at_timeout": len(tpending),
        "tasks_not_succeeded": tasks_bad,
        "deploy_runs": len(runs),
        "deploy_runs_without_end": sum(1 for r in runs if r[2] is None),
        "deploy_ran_more_than_once": {n: c for n, c in starts.items() if c > 1},
        "lock_overlaps": overlaps,
        "creates_refused_503": creates_503,
        "tries_refused_503": tries_503,
        "failed_tries": dict(all_failures),
        "status_codes": dict(load.status_codes),
        "cycles": cycles,
        "host_logs": host_logs,
        "log_lines_of_suspects": suspects,
    }


def summary_markdown(r):
    L = []
    a = L.append
    amo = r["received_twice_or_more"]["at_most_once"]
    alo = r["received_twice_or_more"]["at_least_once"]
    a(f"- trial length: {r['duration_s']} s")
    a(f"- creates acknowledged: **{r['creates_acknowledged']}** "
      f"({', '.join(f'{k} {v}' for k, v in sorted(r['creates_acknowledged_by_mode'].items()))}); "
      f"never acknowledged (gave up): {len(r['creates_never_acknowledged'])}")
    a(f"- **lost** (not `succeeded` in the end, or 404): **{len(r['lost'])}**")
    a(f"- final status by mode: {json.dumps(r['deliveries_final_status_by_mode'])}")
    a(f"- received twice or more: at most once **{len(amo)}**, at least once **{len(alo)}**; "
      f"ended `unknown`: **{len(r['unknown'])}**; succeeded but never received: "
      f"{len(r['succeeded_but_never_received'])}; requests at the receiver: "
      f"{r['receiver_requests']}")
    a(f"- tasks acknowledged: **{r['tasks_acknowledged']}**, not `succeeded`: "
      f"**{len(r['tasks_not_succeeded'])}** (final status: {json.dumps(r['tasks_final_status'])}); "
      f"never acknowledged: {len(r['tasks_never_acknowledged'])}")
    a(f"- deploy.sh runs: {r['deploy_runs']} ({r['deploy_runs_without_end']} without an end line, "
      f"{len(r['deploy_ran_more_than_once'])} tasks whose script ran more than once); "
      f"**lock overlaps: {len(r['lock_overlaps'])}**")
    a(f"- creates refused with 503 (at least once, then sent again with their key): "
      f"**{r['creates_refused_503']}** ({r['tries_refused_503']} tries); every failed try: "
      f"{json.dumps(r['failed_tries'])}")
    a("")
    a("Per cycle, seconds from the kill (or the switchover request): promoted = Patroni names "
      "the other node leader and it is out of recovery; first create = acknowledged on a try "
      "sent after the kill; write gap = from the first refused try to the first create "
      "acknowledged on a try sent after it; rejoined = the old leader streams as the new one's "
      "sync standby (Patroni's /cluster and pg_stat_replication). Refused creates: creates "
      "answered 503 at least once in the window (and their tries). Late: creates whose "
      "acknowledged try took over 1 s (a COMMIT waiting for the synchronous standby).")
    a("")
    a("| # | what | old leader → new | promoted | first create | write gap | rejoined "
      "| creates refused (503) | late (longest) | other failed tries |")
    a("|---|---|---|---|---|---|---|---|---|---|")
    for i, c in enumerate(r["cycles"], 1):
        if c["kind"] == "error":
            a(f"| {i} | stopped: {c['error']} | | | | | | | | |")
            continue
        other = c["other_failures_in_window"]
        kind = "kill -9 postmaster" if c["kind"] == "kill" else "switchover"
        rejoin = (f"{c['rejoined_after_s']} s" if c["rejoined_by_itself"]
                  else f"not within the limit ({c['rejoined_after_s']} s in the end)")
        a(f"| {i} | {kind} ({c['wall_time']}) | {c['old_leader']} → {c['leader_after']} "
          f"| {c['promoted_after_s']} s | {c['first_ack_after_s']} s | {c['write_gap_s']} s "
          f"| {rejoin} | {c['creates_503_in_window']} ({c['tries_503_in_window']} tries) "
          f"| {c['creates_acknowledged_late']} ({c['longest_acknowledgement_s']} s) "
          f"| {json.dumps(other) if other else '—'} |")
    a("")
    a("Host logs:")
    a("")
    for name, h in r["host_logs"].items():
        p = h["phrases"]
        a(f"- {name}: `kept and recorded once it is back` {p['kept']}, `stale primary` "
          f"{p['stale_primary']}, `start-up is waiting` {p['startup_waiting']}; levels "
          f"{json.dumps(h['levels'])}")
        for msg, n in h["warnings_and_errors"].items():
            a(f"  - {n} × {msg}")
    if r["log_lines_of_suspects"]:
        a("")
        a("Log lines naming each delivery or task that did not end as it should:")
        for rid, lines in r["log_lines_of_suspects"].items():
            a("")
            a(f"`{rid}`:")
            a("```")
            L.extend(lines or ["(no line names it)"])
            a("```")
    return "\n".join(L) + "\n"


def cmd_run(args):
    nodes = [Node(s) for s in args.node]
    t_start = now()

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')} +{now() - t_start:6.1f}s] {msg}", flush=True)

    receiver = Receiver(args.receiver_port)
    load = Load(args.host, args.receiver_port, args.rate, args.give_up_after)
    load.start()
    log(f"load: {args.rate} creates/s through {len(args.host)} hosts, a task every 1-2 s")

    cycles = []
    plan = ["kill"] * args.cycles
    if args.switchover_after is not None:
        plan.insert(min(args.switchover_after, len(plan)), "switchover")
    try:
        for kind in plan:
            time.sleep(args.load_between)
            with load.lock:
                log(f"load: {len(load.deliveries)} creates and {len(load.tasks)} tasks "
                    f"acknowledged so far")
            cycles.append(run_cycle(kind, nodes, load, args.rejoin_timeout, log))
        time.sleep(args.load_between)
    except Exception as e:  # report what was measured up to here
        log(f"cycles stopped: {e}")
        cycles.append({"kind": "error", "error": str(e), "t0": now(), "wall_time":
                       time.strftime("%H:%M:%S"), "old_leader": None, "leader_after": None,
                       "promoted_after_s": None, "first_ack_after_s": None,
                       "rejoined_after_s": None, "rejoined_by_itself": False})
    log("load: stopping; waiting for the creates and tasks still being sent again")
    if not load.drain(args.final_timeout):
        log("load: some creates or tasks were still unacknowledged at the drain timeout")
    log(f"check: {len(load.deliveries)} creates and {len(load.tasks)} tasks acknowledged; "
        f"waiting until each is final")
    result = check(args, load, receiver, cycles, t_start)
    receiver.stop()
    for c in result["cycles"]:
        c.pop("t0", None)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2, default=str)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary_markdown(result))
    log(f"check: written to {args.out}/results.json and summary.md")
    return 0


def cmd_wait_cluster(args):
    nodes = [Node(s) for s in args.node]
    got = wait_for(lambda: healthy(nodes), timeout=args.timeout, interval=0.5)
    if not got:
        print(f"no leader with a streaming sync standby within {args.timeout} s: "
              f"{json.dumps(cluster_view(nodes))}", file=sys.stderr)
        return 1
    port = {n.name: n.port for n in nodes}[got[0]]
    print(got[0], port)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait-cluster")
    w.add_argument("--node", action="append", required=True,
                   help="NAME,REST_URL,PG_PORT,DATA_DIR of a Patroni member")
    w.add_argument("--timeout", type=float, default=120)
    r = sub.add_parser("run")
    r.add_argument("--node", action="append", required=True)
    r.add_argument("--host", action="append", required=True, help="a spoold API base URL")
    r.add_argument("--host-log", action="append", required=True, help="a host's stderr file")
    r.add_argument("--receiver-port", type=int, required=True)
    r.add_argument("--deploy-log", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--cycles", type=int, default=5, help="kill -9 cycles")
    r.add_argument("--switchover-after", type=int, default=2,
                   help="the planned switchover comes after this many kills (none: -1)")
    r.add_argument("--rate", type=float, default=30, help="creates a second, all hosts")
    r.add_argument("--load-between", type=float, default=10, help="seconds of load per cycle")
    r.add_argument("--rejoin-timeout", type=float, default=60)
    r.add_argument("--final-timeout", type=float, default=60)
    r.add_argument("--give-up-after", type=float, default=300,
                   help="stop sending one create again after this many seconds")
    args = p.parse_args()
    if args.cmd == "run" and args.switchover_after is not None and args.switchover_after < 0:
        args.switchover_after = None
    return {"run": cmd_run, "wait-cluster": cmd_wait_cluster}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
