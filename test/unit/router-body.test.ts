// The router's one-pass body scan: it finds model, stream, user and the prompt exactly where
// JSON.parse would, refuses what is not a JSON object, and puts a served name in place of a
// deployment alias without touching the rest of the bytes. Pure logic.
import { describe, expect, it } from 'vitest';
import { NOT_AN_OBJECT, scanRequest, withModel, type RequestFields } from '../../router/http/body.js';
import { promptPrefixHash } from '../../router/kv/hashing.js';

const scan = (text: string) => scanRequest(Buffer.from(text));
const fieldsOf = (text: string) => {
  const r = scan(text);
  if (typeof r === 'string') throw new Error(r);
  return r;
};

describe('request body scan', () => {
  it('reads model, stream and user as JSON.parse would, whatever else the body holds', () => {
    const body = {
      temperature: 0.5,
      messages: [{ role: 'user', content: 'a "quoted" word, a \\ backslash and } { ] [ brackets' }],
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
      model: 'llama-3',
      stream: true,
      user: 'alice',
      n: null,
      logit_bias: { '50256': -100 },
      stop: ['\n', '"}'],
    };
    const text = JSON.stringify(body, null, 2);
    const f = fieldsOf(text);
    expect(f).toMatchObject({ model: 'llama-3', stream: true, user: 'alice' });
    expect(JSON.parse(text.slice(f.promptAt, f.promptEnd))).toEqual(body.messages);
    expect(fieldsOf('{"model":"m","stream":false}').stream).toBe(false);
    expect(fieldsOf('{"model":"m"}')).toMatchObject({ stream: false, user: undefined, promptAt: -1 });
    expect(fieldsOf('{"prompt":[1,2,3],"model":"m"}')).toMatchObject({ promptAt: 10, promptEnd: 17 });
  });

  it('decodes escapes in a model name and in keys, and takes the last of duplicate keys', () => {
    expect(fieldsOf('{"model":"caf\\u00e9 \\"x\\""}').model).toBe('café "x"');
    expect(fieldsOf('{"mod\\u0065l":"escaped-key"}').model).toBe('escaped-key');
    expect(fieldsOf('{"model":"first","model":"second"}').model).toBe('second');
    expect(fieldsOf('{"model":"ü-model","x":"ü"}').model).toBe('ü-model');
    expect(fieldsOf('{"model":7}').model).toBeUndefined();
  });

  it('refuses what is not one JSON object, naming where it is wrong', () => {
    expect(scan('[1, 2]')).toBe(NOT_AN_OBJECT);
    expect(scan('"text"')).toBe(NOT_AN_OBJECT);
    expect(scan('')).toMatch(/empty/);
    expect(scan('{"model": "demo",')).toMatch(/property name|not closed/);
    expect(scan('{"model": "demo"')).toMatch(/not closed/);
    expect(scan('{"model": "demo"} trailing')).toMatch(/after the JSON object/);
    expect(scan('{"model" "demo"}')).toMatch(/expected ':'/);
    expect(scan('{"model": "demo}')).toMatch(/unterminated/);
    expect(scan('{"messages": [{"a": 1}}')).toMatch(/unterminated|not closed/);
    expect(scan('{model: "demo"}')).toMatch(/property name/);
  });

  it('puts a served name in place of the model and leaves every other byte as it was', () => {
    const text = '{ "messages":[{"role":"user","content":"hi"}], "model" : "alias", "max_tokens":3 }';
    const b = Buffer.from(text);
    const out = withModel(b, fieldsOf(text), Buffer.from(JSON.stringify('served/name')));
    expect(out.toString()).toBe(text.replace('"alias"', '"served/name"'));
  });

  it('hashes the start of the prompt: a shared long system prompt gives one key, different ones differ', () => {
    const chat = (system: string, user: string) => {
      const text = JSON.stringify({
        model: 'm',
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: user },
        ],
      });
      const b = Buffer.from(text);
      return promptPrefixHash(b, fieldsOf(text) as RequestFields);
    };
    const long = 'You are a careful assistant. '.repeat(60);
    expect(chat(long, 'question one')).toBe(chat(long, 'question two'));
    expect(chat('short', 'question one')).not.toBe(chat('short', 'question two'));
    expect(chat(`${long}A`, 'q')).toBe(chat(`${long}B`, 'q'));
    expect(chat(`A${long}`, 'q')).not.toBe(chat(`B${long}`, 'q'));
    const text = '{"model":"m","input":"embed me"}';
    expect(promptPrefixHash(Buffer.from(text), fieldsOf(text))).toBe(-1);
  });
});
