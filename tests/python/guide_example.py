"""Testing a service against wharf from Python (pika), through the fixture binary.

The README's "Testing your service against wharf" Python example. `wharf --test-mode
--test-clock` prints one JSON line once it accepts clients, and takes clock commands on stdin
(`advance 30m`, `set <ms>`, `now`), answering each with one JSON line.

Run it directly (it needs only pika) or with pytest:

    WHARF_BIN=target/debug/wharf python3 tests/python/guide_example.py

`cargo test --test process testing_guide::` runs it when python3 can import pika.
"""

import json
import os
import signal
import subprocess
import tempfile

import pika

WHARF_BIN = os.environ.get("WHARF_BIN", "wharf")


class Wharf:
    """A wharf broker in a child process, for one test."""

    def __init__(self, *extra_args):
        self.proc = subprocess.Popen(
            [WHARF_BIN, "--test-mode", "--test-clock", *extra_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline()
        if not ready:
            raise RuntimeError("wharf exited before it was ready")
        self.info = json.loads(ready)
        self.amqp_url = self.info["amqp_url"]

    def clock(self, command):
        """Sends one clock command; returns the broker's time in ms once it has reacted."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["now_ms"]

    def advance(self, duration):
        return self.clock(f"advance {duration}")

    def kill(self):
        """Crashes the broker (SIGKILL)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        """Stops it gracefully (SIGTERM); a temporary data directory is removed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def test_order_is_dead_lettered_after_30_minutes():
    wharf = Wharf()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(wharf.amqp_url))
        ch = conn.channel()
        ch.confirm_delivery()  # each publish returns once the broker has the message
        ch.queue_declare("orders.dead")
        ch.queue_declare(
            "orders",
            arguments={
                "x-message-ttl": 30 * 60 * 1000,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "orders.dead",
            },
        )
        ch.basic_publish("", "orders", b"order-1")

        wharf.advance("29m")
        method, _, _ = ch.basic_get("orders.dead", auto_ack=True)
        assert method is None, "not dead-lettered a minute early"

        wharf.advance("1m")
        method, _, body = ch.basic_get("orders.dead", auto_ack=True)
        assert body == b"order-1", "dead-lettered at 30 minutes"
        conn.close()
    finally:
        wharf.stop()


def test_crash_in_the_middle_of_a_publish_batch():
    with tempfile.TemporaryDirectory() as data_dir:
        wharf = Wharf("--data-dir", data_dir)
        try:
            conn = pika.BlockingConnection(pika.URLParameters(wharf.amqp_url))
            confirmed = conn.channel()
            confirmed.confirm_delivery()
            confirmed.queue_declare("jobs", durable=True)
            persistent = pika.BasicProperties(delivery_mode=2)
            bodies = [f"job-{i:03}".encode() for i in range(100)]
            for body in bodies[:10]:
                confirmed.basic_publish("", "jobs", body, persistent)  # waits for the confirm
            unconfirmed = conn.channel()
            for body in bodies[10:]:
                unconfirmed.basic_publish("", "jobs", body, persistent)  # nobody waits
            wharf.kill()
        finally:
            wharf.stop()

        wharf = Wharf("--data-dir", data_dir)
        try:
            conn = pika.BlockingConnection(pika.URLParameters(wharf.amqp_url))
            ch = conn.channel()
            count = ch.queue_declare("jobs", durable=True).method.message_count
            recovered = []
            while True:
                method, _, body = ch.basic_get("jobs", auto_ack=True)
                if method is None:
                    break
                recovered.append(body)
            assert len(recovered) == count, "declare-ok counted what is there"
            assert recovered[:10] == bodies[:10], "every confirmed message, in order"
            assert recovered == bodies[: len(recovered)], "then some of the rest, in order"
            conn.close()
        finally:
            wharf.stop()


if __name__ == "__main__":
    test_order_is_dead_lettered_after_30_minutes()
    test_crash_in_the_middle_of_a_publish_batch()
    print("ok")
