//! The OpenAI-compatible endpoint through the official SDKs: each scenario runs the Python
//! SDK and then the Node SDK (`tools/openai-clients`) against the server under test, with
//! `base_url = <server>/v1` and a tenant's API key, and asserts on what the SDK returned, on
//! what the model was sent, and on the runs and transcripts the turns left.

use crate::support::{GREETING, SLOW_REPLY, scenario};
use agentlane_core::RunStatus;
use agentlane_tests::{Client, SDKS, Scenario, TENANT_A, TENANT_B};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The model naming the agent `main`.
const MAIN: &str = "agentlane";
/// The scripted replies of the name fixtures.
const MET: &str = "Nice to meet you, Ada.";
const NAMED: &str = "Your name is Ada.";

/// The server's OpenAI base URL.
fn base_url(scn: &Scenario) -> String {
    format!("{}/v1", scn.server.url())
}

/// Runs `scenario` with `args` through `sdk` as tenant A.
async fn run_sdk(
    scn: &Scenario,
    sdk: agentlane_tests::Sdk,
    scenario: &str,
    args: Value,
) -> anyhow::Result<Value> {
    let out = sdk
        .run(&base_url(scn), TENANT_A.key, scenario, args)
        .await?;
    eprintln!("{}: {scenario} → {out}", sdk.name());
    Ok(out)
}

/// The model answers "my name is Ada" and "what is my name?" (whatever came before).
fn name_fixtures(scn: &Scenario) -> anyhow::Result<()> {
    scn.mock.add_fixtures(vec![
        json!({"match": {"userMessage": "my name is Ada"}, "response": {"content": MET}}),
        json!({"match": {"userMessage": "what is my name"}, "response": {"content": NAMED}}),
    ])?;
    Ok(())
}

/// `(role, text)` of what the model was sent, system messages left out.
fn conversation_sent(request: &agentlane_tests::ModelRequest) -> Vec<(String, String)> {
    request
        .roles_and_texts()
        .into_iter()
        .filter(|(role, _)| role != "system")
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(r, t)| (r.to_string(), t.to_string()))
        .collect()
}

/// The run of a completion or response `id`, as `GET /v1/runs/{id}` shows it.
async fn run_json(a: &Client, id: &str) -> anyhow::Result<Value> {
    let (status, run) = a.json(Method::GET, &format!("/v1/runs/{id}"), None).await?;
    assert_eq!(status, StatusCode::OK, "{run}");
    Ok(run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_list_the_agents_as_models_and_talk_to_one() -> anyhow::Result<()> {
    // GIVEN tenant A with an agent `support` besides main, and tenant B with none
    let scn = scenario()?;
    let a = scn.a();
    let (status, created) = a
        .json(
            Method::POST,
            "/v1/agents",
            Some(json!({"agentId": "support", "instructions": "You are the support desk."})),
        )
        .await?;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    for sdk in SDKS {
        // WHEN the SDK lists the models, then asks the agent `support` something
        let listed = run_sdk(&scn, sdk, "models", json!({})).await?;
        let answer = run_sdk(
            &scn,
            sdk,
            "complete",
            json!({"model": "agentlane/support", "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await?;

        // THEN the models are main and support, and support answered the turn
        assert_eq!(listed["ids"], json!(["agentlane", "agentlane/support"]));
        assert_eq!(answer["content"], GREETING);
        assert_eq!(answer["model"], "agentlane/support");
        let run = run_json(&a, answer["id"].as_str().unwrap()).await?;
        assert_eq!(run["agentId"], "support");
    }
    // AND the agent's instructions were its system prompt
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let system = request.messages()[0].clone();
        assert_eq!(system["role"], "system", "{system}");
        assert!(
            agentlane_tests::message_text(&system)
                .unwrap_or_default()
                .contains("You are the support desk."),
            "{system}"
        );
    }
    // AND another tenant sees only main
    let theirs = agentlane_tests::Sdk::Python
        .run(&base_url(&scn), TENANT_B.key, "models", json!({}))
        .await?;
    assert_eq!(theirs["ids"], json!(["agentlane"]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_get_a_plain_completion_that_is_a_turn() -> anyhow::Result<()> {
    // GIVEN a server whose model greets anyone who says hello
    let scn = scenario()?;
    let a = scn.a();
    for sdk in SDKS {
        // WHEN the SDK asks for a chat completion
        let answer = run_sdk(
            &scn,
            sdk,
            "complete",
            json!({"model": MAIN, "messages": [{"role": "user", "content": "hello there"}]}),
        )
        .await?;

        // THEN it gets a chat.completion with the reply, finish_reason stop and usage
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(answer["model"], MAIN);
        assert_eq!(answer["role"], "assistant");
        assert_eq!(answer["content"], GREETING);
        assert_eq!(answer["finish_reason"], "stop");
        let usage = &answer["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(
                usage["prompt_tokens"].as_u64().unwrap()
                    + usage["completion_tokens"].as_u64().unwrap()
            ),
            "{usage}"
        );
        // AND its id is the run of the turn, which ended ok with that reply
        let id = answer["id"].as_str().unwrap();
        let run = a.run(id).await?;
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.reply_text(), GREETING);
    }
    assert_eq!(scn.mock.model_requests()?.len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_stream_a_completion_as_the_model_writes_it() -> anyhow::Result<()> {
    // GIVEN a model that writes its reply slowly (about 3 s, a few letters every 250 ms)
    let scn = scenario()?;
    let a = scn.a();
    for sdk in SDKS {
        // WHEN the SDK streams a completion, asking for usage
        let streamed = run_sdk(
            &scn,
            sdk,
            "stream",
            json!({"model": MAIN, "messages": [{"role": "user", "content": "slow and steady"}]}),
        )
        .await?;
        let chunks = streamed["chunks"].as_array().unwrap();

        // THEN the chunks spell the reply: the role first, the text in several pieces, stop,
        // and a last chunk with the usage; all of one completion, the turn's run
        assert!(chunks.len() >= 5, "{streamed}");
        assert_eq!(chunks[0]["role"], "assistant");
        let text: String = chunks
            .iter()
            .filter_map(|c| c["content"].as_str())
            .collect();
        assert_eq!(text, SLOW_REPLY);
        let pieces: Vec<&Value> = chunks
            .iter()
            .filter(|c| c["content"].as_str().is_some_and(|t| !t.is_empty()))
            .collect();
        assert!(pieces.len() >= 3, "the reply came in one piece: {streamed}");
        let stop = chunks.iter().position(|c| c["finish_reason"] == "stop");
        assert!(stop.is_some(), "{streamed}");
        let last = chunks.last().unwrap();
        assert!(last["usage"]["total_tokens"].is_u64(), "{streamed}");
        let id = chunks[0]["id"].as_str().unwrap();
        assert!(
            chunks
                .iter()
                .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk")
        );

        // AND the first piece reached the client long before the turn ended: streamed as
        // written, not buffered to the end
        let run = a.run(id).await?;
        assert_eq!(run.status, RunStatus::Ok);
        let ended = run.ended_at.expect("a finished run has endedAt");
        let first_piece = pieces[0]["at_ms"].as_u64().unwrap();
        assert!(
            first_piece + 1_000 < ended,
            "first piece at {first_piece}, the turn ended at {ended}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_hold_a_two_turn_conversation_through_user() -> anyhow::Result<()> {
    // GIVEN a model that answers "my name is Ada" and "what is my name?"
    let scn = scenario()?;
    name_fixtures(&scn)?;
    let a = scn.a();
    for sdk in SDKS {
        // WHEN the SDK sends two messages, each alone, with the same `user`
        let user = format!("ada-{}", sdk.name());
        let talk = run_sdk(
            &scn,
            sdk,
            "conversation",
            json!({"model": MAIN, "user": user, "messages": [
                {"role": "user", "content": "my name is Ada"},
                {"role": "user", "content": "what is my name?"}
            ]}),
        )
        .await?;

        // THEN both were answered, and they are two turns of the session named by `user`,
        // whose transcript holds the whole conversation
        let replies: Vec<&Value> = talk["replies"].as_array().unwrap().iter().collect();
        assert_eq!(replies[0]["content"], MET);
        assert_eq!(replies[1]["content"], NAMED);
        let transcript = a.transcript(&user).await?;
        assert_eq!(
            transcript.roles(),
            ["user", "assistant", "user", "assistant"]
        );
        assert_eq!(
            transcript.user_texts(),
            ["my name is Ada", "what is my name?"]
        );
        let second = run_json(&a, replies[1]["id"].as_str().unwrap()).await?;
        assert_eq!(second["sessionKey"], user.as_str());
    }
    // AND the model saw the first turn before the second question: the server's transcript
    // is the context
    let requests = scn.mock.model_requests()?;
    let seconds: Vec<_> = requests
        .iter()
        .filter(|r| r.last_user_text().as_deref() == Some("what is my name?"))
        .collect();
    assert_eq!(seconds.len(), 2);
    for request in seconds {
        assert_eq!(
            conversation_sent(request),
            pairs(&[
                ("user", "my name is Ada"),
                ("assistant", MET),
                ("user", "what is my name?")
            ])
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_send_a_stateless_history_that_seeds_a_fresh_session() -> anyhow::Result<()> {
    // GIVEN a model that answers "what is my name?"
    let scn = scenario()?;
    name_fixtures(&scn)?;
    let a = scn.a();
    let mut sessions = Vec::new();
    for sdk in SDKS {
        // WHEN the SDK sends a whole conversation without a session
        let answer = run_sdk(
            &scn,
            sdk,
            "complete",
            json!({"model": MAIN, "messages": [
                {"role": "system", "content": "Always answer in French."},
                {"role": "user", "content": "my name is Ada"},
                {"role": "assistant", "content": "Enchantée, Ada."},
                {"role": "user", "content": "what is my name?"}
            ]}),
        )
        .await?;

        // THEN it is answered on a fresh session of its own whose transcript starts with the
        // conversation sent
        assert_eq!(answer["content"], NAMED);
        let run = run_json(&a, answer["id"].as_str().unwrap()).await?;
        let key = run["sessionKey"].as_str().unwrap().to_owned();
        let transcript = a.transcript(&key).await?;
        assert_eq!(
            transcript.roles(),
            ["user", "assistant", "user", "assistant"]
        );
        assert_eq!(
            transcript.user_texts(),
            ["my name is Ada", "what is my name?"]
        );
        sessions.push(key);
    }
    assert_ne!(
        sessions[0], sessions[1],
        "each stateless request has its own session"
    );
    // AND the model was sent that history after a system prompt carrying the system message
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let system = agentlane_tests::message_text(&request.messages()[0]).unwrap_or_default();
        assert!(system.contains("Always answer in French."), "{system}");
        assert_eq!(
            conversation_sent(request),
            pairs(&[
                ("user", "my name is Ada"),
                ("assistant", "Enchantée, Ada."),
                ("user", "what is my name?")
            ])
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_chain_responses_with_previous_response_id() -> anyhow::Result<()> {
    // GIVEN a model that answers "my name is Ada", "what is my name?", and slowly "slow"
    let scn = scenario()?;
    name_fixtures(&scn)?;
    let a = scn.a();
    let mut firsts = Vec::new();
    for sdk in SDKS {
        // WHEN the SDK creates a response, then one that continues it, then a streamed one
        let out = run_sdk(
            &scn,
            sdk,
            "responses",
            json!({"model": MAIN, "first": "my name is Ada", "second": "what is my name?",
                   "streamed": "slow and steady"}),
        )
        .await?;

        // THEN each is a completed response of its turn, the second continuing the first
        let (first, second) = (&out["first"], &out["second"]);
        assert_eq!(first["object"], "response");
        assert_eq!(first["status"], "completed");
        assert_eq!(first["output_text"], MET);
        assert_eq!(second["output_text"], NAMED);
        assert_eq!(second["previous_response_id"], first["id"]);
        let (one, two) = (
            run_json(&a, first["id"].as_str().unwrap()).await?,
            run_json(&a, second["id"].as_str().unwrap()).await?,
        );
        assert_eq!(one["sessionKey"], two["sessionKey"], "one session");
        // AND the streamed one went through OpenAI's event sequence, spelling the reply
        let streamed = &out["streamed"];
        let types: Vec<&str> = streamed["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(types.first(), Some(&"response.created"), "{types:?}");
        assert_eq!(types.last(), Some(&"response.completed"), "{types:?}");
        assert!(
            types
                .iter()
                .filter(|t| **t == "response.output_text.delta")
                .count()
                >= 2,
            "{types:?}"
        );
        for expected in [
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ] {
            assert!(types.contains(&expected), "{expected} missing: {types:?}");
        }
        assert_eq!(streamed["text"], SLOW_REPLY);
        assert_eq!(streamed["completed"]["output_text"], SLOW_REPLY);
        assert_eq!(streamed["completed"]["status"], "completed");
        firsts.push(first["id"].as_str().unwrap().to_owned());
    }
    // AND the model saw the first exchange before the second question
    let requests = scn.mock.model_requests()?;
    let seconds: Vec<_> = requests
        .iter()
        .filter(|r| r.last_user_text().as_deref() == Some("what is my name?"))
        .collect();
    assert_eq!(seconds.len(), 2);
    for request in seconds {
        assert_eq!(
            conversation_sent(request),
            pairs(&[
                ("user", "my name is Ada"),
                ("assistant", MET),
                ("user", "what is my name?")
            ])
        );
    }
    // AND another tenant cannot continue tenant A's response
    let (status, refused) = scn
        .b()
        .json(
            Method::POST,
            "/v1/responses",
            Some(json!({"model": MAIN, "input": "what is my name?", "previous_response_id": firsts[0]})),
        )
        .await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(refused["error"]["code"], "previous_response_not_found");
    assert_eq!(refused["error"]["type"], "invalid_request_error");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_see_refusals_in_openais_error_shape() -> anyhow::Result<()> {
    // GIVEN a server
    let scn = scenario()?;
    for sdk in SDKS {
        // WHEN the SDK uses a wrong key, sends no messages, asks for n = 2, names an unknown
        // model, offers a tool of a type it cannot run, and offers tools to Responses
        let out = run_sdk(&scn, sdk, "errors", json!({"model": MAIN})).await?;

        // THEN each is the SDK's error class for OpenAI's status, with OpenAI's error body
        let expect =
            |name: &str, status: u64, class: &str, kind: &str, code: Value, param: Value| {
                let got = &out[name];
                assert_eq!(got["status"], status, "{name}: {got}");
                assert_eq!(got["class"], class, "{name}: {got}");
                assert_eq!(got["body"]["type"], kind, "{name}: {got}");
                assert_eq!(got["body"]["code"], code, "{name}: {got}");
                assert_eq!(got["body"]["param"], param, "{name}: {got}");
                assert!(
                    got["body"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()),
                    "{name}: {got}"
                );
            };
        let invalid = "invalid_request_error";
        expect(
            "auth",
            401,
            "AuthenticationError",
            invalid,
            json!("invalid_api_key"),
            Value::Null,
        );
        expect(
            "bad_request",
            400,
            "BadRequestError",
            invalid,
            Value::Null,
            json!("messages"),
        );
        expect(
            "n",
            400,
            "BadRequestError",
            invalid,
            json!("n_not_supported"),
            json!("n"),
        );
        expect(
            "model",
            404,
            "NotFoundError",
            invalid,
            json!("model_not_found"),
            json!("model"),
        );
        expect(
            "tools",
            400,
            "BadRequestError",
            invalid,
            json!("tool_type_not_supported"),
            json!("tools[0]"),
        );
        expect(
            "response_tools",
            400,
            "BadRequestError",
            invalid,
            json!("tools_not_supported"),
            json!("tools"),
        );
        let message = out["response_tools"]["body"]["message"].as_str().unwrap();
        assert!(message.contains("/v1/chat/completions"), "{message}");
    }
    // AND none of them reached the model or queued a turn
    assert_eq!(scn.mock.model_requests()?.len(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdks_run_a_client_tool_round_trip() -> anyhow::Result<()> {
    // GIVEN a model that calls the client's weather tool, then answers from its result
    let scn = scenario()?;
    let a = scn.a();
    let mut fixtures = Vec::new();
    for (city, reply) in [
        ("Paris", "It is sunny in Paris."),
        ("Rome", "It rains in Rome."),
    ] {
        let question = format!("weather in {city}");
        fixtures.push(
            json!({"match": {"userMessage": question, "hasToolResult": true},
                             "response": {"content": reply}}),
        );
        fixtures.push(
            json!({"match": {"userMessage": question, "hasToolResult": false},
                             "response": {"toolCalls": [{"id": format!("call_{city}"),
                                 "name": "get_weather", "arguments": {"city": city}}]}}),
        );
    }
    scn.mock.add_fixtures(fixtures)?;
    let weather = json!({"Paris": "sunny, 21 C", "Rome": "rain, 14 C"});

    for sdk in SDKS {
        for (city, reply, stream, user) in [
            (
                "Paris",
                "It is sunny in Paris.",
                false,
                Some(format!("{}-tools", sdk.name())),
            ),
            ("Rome", "It rains in Rome.", true, None),
        ] {
            // WHEN the SDK offers its tool (a named session, then a stateless stream), runs the
            // call the answer carries and sends the result back as a role "tool" message
            let out = run_sdk(
                &scn,
                sdk,
                "client_tool",
                json!({"model": MAIN, "question": format!("weather in {city}"), "stream": stream,
                       "user": user, "weather": weather}),
            )
            .await?;

            // THEN the first answer is the call (finish_reason tool_calls, an id naming the run)
            let first = &out["first"];
            assert_eq!(first["finish_reason"], "tool_calls", "{out}");
            let calls = first["tool_calls"].as_array().cloned().unwrap_or_default();
            assert_eq!(calls.len(), 1, "{out}");
            assert_eq!(calls[0]["name"], "get_weather");
            let arguments: Value = serde_json::from_str(calls[0]["arguments"].as_str().unwrap())?;
            assert_eq!(arguments, json!({"city": city}));
            let run_id = first["id"].as_str().unwrap();
            assert_eq!(
                calls[0]["id"].as_str().unwrap(),
                format!("{run_id}.call_{city}"),
                "{out}"
            );
            // AND the second answer is the same turn's continuation, from the tool's result
            let second = &out["second"];
            assert_eq!(second["finish_reason"], "stop", "{out}");
            assert_eq!(second["content"], reply, "{out}");
            assert_eq!(second["id"], first["id"], "one turn: {out}");
            let run = a.run(run_id).await?;
            assert_eq!(run.status, RunStatus::Ok);
            assert_eq!(run.reply_text(), reply);
            let session = run_json(&a, run_id).await?["sessionKey"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if let Some(user) = &user {
                assert_eq!(&session, user);
            }
            // AND the run's transcript holds the call, the client's result and the reply
            let entries = a.transcript(&session).await?.entries;
            agentlane_tests::check_pairing(&agentlane_tests::transcript_items(&entries))?;
            let expected = weather[city].as_str().unwrap();
            assert!(
                entries.iter().any(|e| matches!(&e.message,
                    agentlane_core::Message::Tool { content, is_error: false, .. } if content == expected)),
                "the client's result is the tool result: {entries:?}"
            );
        }
    }
    // AND the model saw the tool result before answering: two model calls per round trip
    let requests = scn.mock.model_requests()?;
    assert_eq!(requests.len(), 8);
    assert!(requests[0].tool_names().contains(&"get_weather".to_owned()));

    // AND results that answer no paused turn are refused in OpenAI's shape
    let (status, body) = a
        .json(
            Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": MAIN, "messages": [
                {"role": "user", "content": "weather in Paris"},
                {"role": "tool", "tool_call_id": "call_Paris", "content": "sunny"}]})),
        )
        .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["param"], "messages", "{body}");
    Ok(())
}
