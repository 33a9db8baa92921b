"""A client generated from docs/openapi.json by openapi-python-client (pinned in
requirements.txt), used as a user would: submit a turn on a session whose key holds `/`, wait
for it, read the run, its events and the transcript. Prints what the client returned as one
JSON object (the Rust test asserts on it). Usage: scenario.py BASE_URL API_KEY SESSION_KEY
(the generated package `agentlane_client` on PYTHONPATH)."""

import json
import sys

from agentlane_client import AuthenticatedClient
from agentlane_client.api.agent import submit_turn, wait_run
from agentlane_client.api.runs import get_run, run_events
from agentlane_client.api.sessions import get_transcript
from agentlane_client.models import (
    AcceptedView,
    AgentBody,
    AssistantMessage,
    EventsView,
    TranscriptView,
    UserMessage,
    WaitBody,
    WaitView,
)


def main() -> None:
    base, key, session = sys.argv[1:4]
    client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)
    accepted = submit_turn.sync(client=client, body=AgentBody(session_key=session, message="hello there"))
    assert isinstance(accepted, AcceptedView), accepted
    waited = wait_run.sync(client=client, body=WaitBody(run_id=accepted.run_id, timeout_ms=20000))
    assert isinstance(waited, WaitView), waited
    run = get_run.sync(accepted.run_id, client=client)
    events = run_events.sync(accepted.run_id, client=client)
    assert isinstance(events, EventsView), events
    transcript = get_transcript.sync(session, client=client)
    assert isinstance(transcript, TranscriptView), transcript
    kinds = []
    texts = []
    for entry in transcript.entries:
        message = entry.message
        kinds.append(type(message).__name__)
        if isinstance(message, (UserMessage, AssistantMessage)):
            texts.append(message.content)
    print(
        json.dumps(
            {
                "runId": accepted.run_id,
                "waitStatus": str(waited.status),
                "liveness": str(waited.liveness_state),
                "runStatus": str(run.status),
                "eventStreams": sorted({str(e.stream) for e in events.events}),
                "messageClasses": kinds,
                "texts": texts,
            }
        )
    )


if __name__ == "__main__":
    main()
