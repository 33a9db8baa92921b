// One scenario of the end-to-end tests, run with the official OpenAI Node SDK (pinned in
// package.json) against agentlane's OpenAI-compatible endpoint.
//
//     node client.mjs <scenario> '<json arguments>'
//
// with AGENTLANE_BASE_URL (`http://127.0.0.1:PORT/v1`) and AGENTLANE_API_KEY set. Prints one
// JSON object on stdout, in the same shapes as client.py (the Rust test asserts on it).

import OpenAI from 'openai';
import { VERSION } from 'openai/version';

function client(apiKey) {
  return new OpenAI({
    baseURL: process.env.AGENTLANE_BASE_URL,
    apiKey: apiKey ?? process.env.AGENTLANE_API_KEY,
    // A retry would send a turn again: the tests want to see each answer as it is.
    maxRetries: 0,
    timeout: 120_000,
  });
}

async function completion(c, args) {
  const answer = await c.chat.completions.create({
    model: args.model,
    messages: args.messages,
    ...(args.user ? { user: args.user } : {}),
  });
  const choice = answer.choices[0];
  return {
    id: answer.id,
    object: answer.object,
    model: answer.model,
    content: choice.message.content,
    role: choice.message.role,
    finish_reason: choice.finish_reason,
    usage: answer.usage ?? null,
  };
}

const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: "The weather in a city, from the client's own service",
    parameters: { type: 'object', properties: { city: { type: 'string' } } },
  },
};

async function askWithTools(c, args, messages, stream) {
  const extra = args.user ? { user: args.user } : {};
  if (!stream) {
    const answer = await c.chat.completions.create({
      model: args.model,
      messages,
      tools: [WEATHER],
      ...extra,
    });
    const message = answer.choices[0].message;
    return {
      id: answer.id,
      finish_reason: answer.choices[0].finish_reason,
      content: message.content ?? null,
      tool_calls: (message.tool_calls ?? []).map((t) => ({
        id: t.id,
        name: t.function.name,
        arguments: t.function.arguments,
      })),
    };
  }
  let content = '';
  let finish = null;
  let id = null;
  const calls = new Map();
  const events = await c.chat.completions.create({
    model: args.model,
    messages,
    tools: [WEATHER],
    stream: true,
    ...extra,
  });
  for await (const chunk of events) {
    id = chunk.id;
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta?.content ?? '';
    for (const t of choice.delta?.tool_calls ?? []) {
      const call = calls.get(t.index) ?? { id: null, name: '', arguments: '' };
      if (t.id) call.id = t.id;
      if (t.function?.name) call.name += t.function.name;
      if (t.function?.arguments) call.arguments += t.function.arguments;
      calls.set(t.index, call);
    }
    finish = choice.finish_reason ?? finish;
  }
  const tool_calls = [...calls.keys()].sort((x, y) => x - y).map((k) => calls.get(k));
  return { id, finish_reason: finish, content: content || null, tool_calls };
}

const scenarios = {
  // The model calls the client's tool; the client runs it and sends the result back.
  async client_tool(args) {
    const c = client();
    const stream = Boolean(args.stream);
    const messages = [{ role: 'user', content: args.question }];
    const first = await askWithTools(c, args, messages, stream);
    messages.push({
      role: 'assistant',
      content: first.content,
      tool_calls: first.tool_calls.map((t) => ({
        id: t.id,
        type: 'function',
        function: { name: t.name, arguments: t.arguments },
      })),
    });
    for (const t of first.tool_calls) {
      const city = JSON.parse(t.arguments).city ?? '';
      messages.push({ role: 'tool', tool_call_id: t.id, content: args.weather[city] });
    }
    const second = await askWithTools(c, args, messages, stream);
    return { first, second };
  },


  async models() {
    const ids = [];
    for await (const model of client().models.list()) ids.push(model.id);
    return { ids };
  },

  async complete(args) {
    return completion(client(), args);
  },

  async stream(args) {
    const chunks = [];
    const started_ms = Date.now();
    const events = await client().chat.completions.create({
      model: args.model,
      messages: args.messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    for await (const chunk of events) {
      const choice = chunk.choices[0];
      chunks.push({
        at_ms: Date.now(),
        id: chunk.id,
        object: chunk.object,
        role: choice?.delta?.role ?? null,
        content: choice?.delta?.content ?? null,
        finish_reason: choice?.finish_reason ?? null,
        usage: chunk.usage ?? null,
      });
    }
    return { started_ms, chunks };
  },

  async conversation(args) {
    const c = client();
    const replies = [];
    for (const message of args.messages) {
      replies.push(await completion(c, { model: args.model, user: args.user, messages: [message] }));
    }
    return { replies };
  },

  async responses(args) {
    const c = client();
    const view = (r) => ({
      id: r.id,
      object: r.object,
      status: r.status,
      output_text: r.output_text,
      previous_response_id: r.previous_response_id ?? null,
    });
    const first = await c.responses.create({ model: args.model, input: args.first });
    const second = await c.responses.create({
      model: args.model,
      input: args.second,
      previous_response_id: first.id,
    });
    const types = [];
    let text = '';
    let completed = null;
    const events = await c.responses.create({ model: args.model, input: args.streamed, stream: true });
    for await (const event of events) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') {
        // The SDK adds output_text to the responses it parses; an event's is as sent.
        const r = event.response;
        const output_text = r.output
          .flatMap((item) => item.content ?? [])
          .filter((part) => part.type === 'output_text')
          .map((part) => part.text)
          .join('');
        completed = { ...view(r), output_text };
      }
    }
    return { first: view(first), second: view(second), streamed: { types, text, completed } };
  },

  async errors(args) {
    const model = args.model;
    const hi = [{ role: 'user', content: 'hello' }];
    const c = client();
    const refused = async (call) => {
      try {
        await call();
      } catch (error) {
        if (error instanceof OpenAI.APIError) {
          return {
            status: error.status,
            class: error.constructor.name,
            body: error.error ?? null,
            should_retry: error.headers?.get('x-should-retry') ?? null,
          };
        }
        throw error;
      }
      return { status: 200 };
    };
    const tool = { type: 'code_interpreter' };
    return {
      auth: await refused(() =>
        client('not-a-key-of-anyone-here').chat.completions.create({ model, messages: hi }),
      ),
      bad_request: await refused(() => c.chat.completions.create({ model, messages: [] })),
      n: await refused(() => c.chat.completions.create({ model, messages: hi, n: 2 })),
      model: await refused(() => c.chat.completions.create({ model: 'gpt-4o', messages: hi })),
      tools: await refused(() => c.chat.completions.create({ model, messages: hi, tools: [tool] })),
      response_tools: await refused(() =>
        c.responses.create({
          model,
          input: 'hello',
          tools: [{ type: 'function', name: 'lookup', parameters: {} }],
        }),
      ),
    };
  },
};

const [name, raw] = process.argv.slice(2);
const result = await scenarios[name](raw ? JSON.parse(raw) : {});
result.sdk = `node openai ${VERSION}`;
console.log(JSON.stringify(result));
