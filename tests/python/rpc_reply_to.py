"""Direct reply-to (S-DRT) with pika's own RPC habits, against the broker at $WHARF_URL.

A responder thread consumes `rpc_queue` with acks and answers each request to its `reply_to`
through the default exchange; the client consumes `amq.rabbitmq.reply-to` with auto_ack and
publishes requests with `reply_to` set to it, then waits with process_data_events, as the
RabbitMQ tutorial's RPC client does. Prints "ok" when every answer came back in order.
"""
import os
import sys
import threading
import uuid

import pika

URL = os.environ["WHARF_URL"]
ready = threading.Event()


def responder():
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    ch = conn.channel()
    ch.queue_declare(queue="rpc_queue")
    ch.basic_qos(prefetch_count=1)

    def on_request(ch, method, props, body):
        assert props.reply_to.startswith("amq.rabbitmq.reply-to."), props.reply_to
        ch.basic_publish(
            exchange="",
            routing_key=props.reply_to,
            properties=pika.BasicProperties(correlation_id=props.correlation_id),
            body=str(int(body) * 2).encode(),
        )
        ch.basic_ack(delivery_tag=method.delivery_tag)
        if body == b"-1":
            ch.stop_consuming()

    ch.basic_consume(queue="rpc_queue", on_message_callback=on_request)
    ready.set()
    ch.start_consuming()
    conn.close()


def main():
    server = threading.Thread(target=responder, daemon=True)
    server.start()
    if not ready.wait(10):
        sys.exit("responder did not start")
    conn = pika.BlockingConnection(pika.URLParameters(URL))
    caps = conn._impl.server_capabilities
    if caps.get("direct_reply_to") is not True:
        sys.exit(f"direct_reply_to not advertised: {caps}")
    ch = conn.channel()
    answers = {}

    def on_response(ch, method, props, body):
        answers[props.correlation_id] = body

    ch.basic_consume(
        queue="amq.rabbitmq.reply-to", on_message_callback=on_response, auto_ack=True
    )
    for n in list(range(20)) + [-1]:
        corr = str(uuid.uuid4())
        ch.basic_publish(
            exchange="",
            routing_key="rpc_queue",
            properties=pika.BasicProperties(
                reply_to="amq.rabbitmq.reply-to", correlation_id=corr
            ),
            body=str(n).encode(),
        )
        for _ in range(100):
            if corr in answers:
                break
            conn.process_data_events(time_limit=0.1)
        if answers.get(corr) != str(n * 2).encode():
            sys.exit(f"request {n}: answer {answers.get(corr)!r}")
    conn.close()
    server.join(10)
    print("ok")


main()
