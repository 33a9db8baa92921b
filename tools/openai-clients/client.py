"""One scenario of the end-to-end tests, run with the official OpenAI Python SDK (pinned in
requirements.txt) against agentlane's OpenAI-compatible endpoint.

    python client.py <scenario> '<json arguments>'

with AGENTLANE_BASE_URL (`http://127.0.0.1:PORT/v1`) and AGENTLANE_API_KEY set. Prints one JSON
object on stdout: what the SDK returned (the Rust test asserts on it). client.mjs runs the same
scenarios with the Node SDK and prints the same shapes.
"""

import json
import os
import sys
import time

import openai


def now_ms() -> int:
    return int(time.time() * 1000)


def client(api_key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=os.environ["AGENTLANE_BASE_URL"],
        api_key=api_key or os.environ["AGENTLANE_API_KEY"],
        # A retry would send a turn again: the tests want to see each answer as it is.
        max_retries=0,
        timeout=120,
    )


def completion(c: openai.OpenAI, args: dict) -> dict:
    extra = {"user": args["user"]} if args.get("user") else {}
    answer = c.chat.completions.create(
        model=args["model"], messages=args["messages"], **extra
    )
    choice = answer.choices[0]
    return {
        "id": answer.id,
        "object": answer.object,
        "model": answer.model,
        "content": choice.message.content,
        "role": choice.message.role,
        "finish_reason": choice.finish_reason,
        "usage": answer.usage.model_dump() if answer.usage else None,
    }


def models(args: dict) -> dict:
    return {"ids": [m.id for m in client().models.list()]}


def complete(args: dict) -> dict:
    return completion(client(), args)


def stream(args: dict) -> dict:
    chunks = []
    started = now_ms()
    with client().chat.completions.create(
        model=args["model"],
        messages=args["messages"],
        stream=True,
        stream_options={"include_usage": True},
    ) as events:
        for chunk in events:
            choice = chunk.choices[0] if chunk.choices else None
            chunks.append(
                {
                    "at_ms": now_ms(),
                    "id": chunk.id,
                    "object": chunk.object,
                    "role": choice.delta.role if choice else None,
                    "content": choice.delta.content if choice else None,
                    "finish_reason": choice.finish_reason if choice else None,
                    "usage": chunk.usage.model_dump() if chunk.usage else None,
                }
            )
    return {"started_ms": started, "chunks": chunks}


def conversation(args: dict) -> dict:
    c = client()
    replies = [
        completion(c, {"model": args["model"], "user": args["user"], "messages": [m]})
        for m in args["messages"]
    ]
    return {"replies": replies}


def response_view(response) -> dict:
    return {
        "id": response.id,
        "object": response.object,
        "status": response.status,
        "output_text": response.output_text,
        "previous_response_id": response.previous_response_id,
    }


def responses(args: dict) -> dict:
    c = client()
    first = c.responses.create(model=args["model"], input=args["first"])
    second = c.responses.create(
        model=args["model"], input=args["second"], previous_response_id=first.id
    )
    kinds, text, completed = [], "", None
    for event in c.responses.create(model=args["model"], input=args["streamed"], stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            completed = response_view(event.response)
    return {
        "first": response_view(first),
        "second": response_view(second),
        "streamed": {"types": kinds, "text": text, "completed": completed},
    }


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, from the client's own service",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def ask_with_tools(c: openai.OpenAI, args: dict, messages: list, stream: bool) -> dict:
    extra = {"user": args["user"]} if args.get("user") else {}
    if not stream:
        answer = c.chat.completions.create(
            model=args["model"], messages=messages, tools=[WEATHER], **extra
        )
        message = answer.choices[0].message
        calls = [
            {"id": t.id, "name": t.function.name, "arguments": t.function.arguments}
            for t in message.tool_calls or []
        ]
        return {
            "id": answer.id,
            "finish_reason": answer.choices[0].finish_reason,
            "content": message.content,
            "tool_calls": calls,
        }
    content, calls, finish, ident, first_ms = "", {}, None, None, None
    with c.chat.completions.create(
        model=args["model"], messages=messages, tools=[WEATHER], stream=True, **extra
    ) as events:
        for chunk in events:
            ident = chunk.id
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            content += choice.delta.content or ""
            for t in choice.delta.tool_calls or []:
                call = calls.setdefault(t.index, {"id": None, "name": "", "arguments": ""})
                if t.id:
                    call["id"] = t.id
                if t.function and t.function.name:
                    call["name"] += t.function.name
                if t.function and t.function.arguments:
                    call["arguments"] += t.function.arguments
            finish = choice.finish_reason or finish
    return {
        "id": ident,
        "finish_reason": finish,
        "content": content or None,
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def client_tool(args: dict) -> dict:
    """The model calls the client's tool; the client runs it and sends the result back."""
    c = client()
    stream = bool(args.get("stream"))
    messages = [{"role": "user", "content": args["question"]}]
    first = ask_with_tools(c, args, messages, stream)
    messages.append(
        {
            "role": "assistant",
            "content": first["content"],
            "tool_calls": [
                {
                    "id": t["id"],
                    "type": "function",
                    "function": {"name": t["name"], "arguments": t["arguments"]},
                }
                for t in first["tool_calls"]
            ],
        }
    )
    for t in first["tool_calls"]:
        city = json.loads(t["arguments"]).get("city", "")
        messages.append(
            {"role": "tool", "tool_call_id": t["id"], "content": args["weather"][city]}
        )
    second = ask_with_tools(c, args, messages, stream)
    return {"first": first, "second": second}


def refused(call) -> dict:
    try:
        call()
    except openai.APIStatusError as error:
        return {
            "status": error.status_code,
            "class": type(error).__name__,
            "body": error.body,
            "should_retry": error.response.headers.get("x-should-retry"),
        }
    return {"status": 200}


def errors(args: dict) -> dict:
    model, hi = args["model"], [{"role": "user", "content": "hello"}]
    c = client()
    tool = {"type": "code_interpreter"}
    return {
        "auth": refused(
            lambda: client("not-a-key-of-anyone-here").chat.completions.create(
                model=model, messages=hi
            )
        ),
        "bad_request": refused(lambda: c.chat.completions.create(model=model, messages=[])),
        "n": refused(lambda: c.chat.completions.create(model=model, messages=hi, n=2)),
        "model": refused(lambda: c.chat.completions.create(model="gpt-4o", messages=hi)),
        "tools": refused(
            lambda: c.chat.completions.create(model=model, messages=hi, tools=[tool])
        ),
        "response_tools": refused(
            lambda: c.responses.create(
                model=model, input="hello", tools=[{"type": "function", "name": "lookup", "parameters": {}}]
            )
        ),
    }


SCENARIOS = {
    "models": models,
    "complete": complete,
    "stream": stream,
    "conversation": conversation,
    "responses": responses,
    "errors": errors,
    "client_tool": client_tool,
}


def main() -> None:
    name, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    result = SCENARIOS[name](args)
    result["sdk"] = f"python openai {openai.__version__}"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
