#!/usr/bin/env node
// A third-party AMQP 1.0 client for the interop tests (tests/test_interop_rhea.py): rhea, a pure
// JavaScript implementation that shares no code with proton.
//
//   node rhea_client.js '<json spec>'
//   node rhea_client.js - < spec.json      (the spec on stdin: large message bodies exceed argv limits)
//
// Spec fields:
//   host, port, servername         where to connect; servername is the broker's CN (SNI, hostname
//                                  check, AMQP open hostname and SASL hostname)
//   ca, cert, key                  PEM paths: trust bundle, own chain, own key; no cert/key = no
//                                  client certificate
//   sasl                           "EXTERNAL" (default), "ANONYMOUS" or "none"
//   tls_min, tls_max               e.g. "TLSv1.2" (default: Node's own range)
//   timeout_ms                     overall bound (default 10000): then {"event":"timeout"} and exit 3
//   mode "publish": address, messages: [{application_properties: {name: {type, value}} | {name: plain},
//                   body_hex, ttl? (ms), durable?, subject?, message_id?}], presettled?
//        prints {"event":"attached",target} (target null: refused), {"event":"sent",index,encoded_hex} per message and {"event":"outcome",index,outcome,
//        error?} per disposition; exits 0 once every message has an outcome (presettled: true sends
//        settled deliveries and exits once all are written)
//   mode "consume": address, selector?, count, linger_ms (default 300: extra wait for unexpected
//        messages after count), credit (default 100)
//        prints {"event":"attached",source} (null: refused; else address and the echoed filter) then {"event":"message",application_properties,body_hex,
//        raw_hex} per message (autoaccept); exits 0 after count messages and linger_ms
// Errors: {"event":"link_error"|"connection_error"|"disconnected"|"protocol_error", condition,
// description|error, code?} and exit 2. Every line is one JSON object on stdout.
'use strict';

const fs = require('fs');
const rhea = require('rhea');

const types = rhea.types;
const spec = JSON.parse(process.argv[2] === '-' ? fs.readFileSync(0, 'utf8') : process.argv[2]);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
// exit once stdout is flushed (a pipe takes large lines in several writes)
const finish = (code) => { process.exitCode = code; process.stdout.write('', () => process.exit(code)); };

setTimeout(() => {
  out({event: 'timeout', error: `no result within ${spec.timeout_ms || 10000} ms`});
  finish(3);
}, spec.timeout_ms || 10000).unref();

// ------------------------------------------------------------------- values
function int64Buffer(value, signed) {
  const buffer = Buffer.alloc(8);
  if (signed) buffer.writeBigInt64BE(BigInt(value)); else buffer.writeBigUInt64BE(BigInt(value));
  return buffer;
}

// {type, value} -> a rhea typed value. 64-bit values may be decimal strings (beyond 2^53).
const WRAP = {
  string: (v) => types.wrap_string(v),
  symbol: (v) => types.wrap_symbol(v),
  boolean: (v) => types.wrap_boolean(v),
  null: () => types.Null(),
  ubyte: (v) => types.wrap_ubyte(v),
  ushort: (v) => types.wrap_ushort(v),
  uint: (v) => types.wrap_uint(v),
  ulong: (v) => types.wrap_ulong(typeof v === 'string' ? int64Buffer(v, false) : v),
  byte: (v) => types.wrap_byte(v),
  short: (v) => types.wrap_short(v),
  int: (v) => types.wrap_int(v),
  long: (v) => types.wrap_long(typeof v === 'string' ? int64Buffer(v, true) : v),
  float: (v) => types.wrap_float(v),
  double: (v) => types.wrap_double(v),
  timestamp: (v) => types.wrap_timestamp(v),
  char: (v) => types.wrap_char(v.codePointAt(0)),
  uuid: (v) => types.wrap_uuid(Buffer.from(v.replace(/-/g, ''), 'hex')),
  binary: (v) => types.wrap_binary(Buffer.from(v, 'hex')),
};

function wrapProperty(spec) {
  if (spec === null || typeof spec !== 'object') return spec;  // plain: rhea infers the type
  const wrap = WRAP[spec.type];
  if (!wrap) throw new Error(`unknown property type ${spec.type}`);
  return wrap(spec.value);
}

// A decoded rhea value as JSON: buffers as hex, dates as ms, typed values with rhea's type name.
function plain(value) {
  if (Buffer.isBuffer(value)) return {hex: value.toString('hex')};
  if (value instanceof Date) return value.getTime();
  if (Array.isArray(value)) return value.map(plain);
  if (value && value.type && value.type.name !== undefined && 'value' in value) return typed(value);
  if (value && typeof value === 'object') {
    const result = {};
    for (const key of Object.keys(value)) result[key] = plain(value[key]);
    return result;
  }
  return value;
}

function typed(t) {
  const result = {type: t.type.name, value: plain(t.value)};
  if (t.descriptor) result.descriptor = plain(t.descriptor);
  return result;
}

// rhea decodes application properties to plain JS values and drops their AMQP types; keep the
// raw bytes and the typed section too by wrapping its decoder (session.js calls message.decode).
const decode = rhea.message.decode;
rhea.message.decode = function (buffer) {
  const msg = decode(buffer);
  msg._raw = Buffer.from(buffer);
  const reader = new types.Reader(buffer);
  while (reader.remaining()) {
    const section = reader.read();
    if (section.descriptor && Number(section.descriptor.value) === 0x74) {
      const props = {};
      for (let i = 0; i + 1 < section.value.length; i += 2) props[section.value[i].value] = typed(section.value[i + 1]);
      msg._typed_properties = props;
    }
  }
  return msg;
};

// ------------------------------------------------------------------- connection
const options = {
  transport: 'tls',
  host: spec.host || '127.0.0.1',
  port: spec.port,
  servername: spec.servername,
  hostname: spec.servername,
  ca: fs.readFileSync(spec.ca),
  reconnect: false,
  idle_time_out: 0,
};
if (spec.cert) options.cert = fs.readFileSync(spec.cert);
if (spec.key) options.key = fs.readFileSync(spec.key);
if (spec.tls_min) options.minVersion = spec.tls_min;
if (spec.tls_max) options.maxVersion = spec.tls_max;
const sasl = spec.sasl || 'EXTERNAL';
if (sasl === 'EXTERNAL') options.enable_sasl_external = true;
else if (sasl === 'ANONYMOUS') options.username = 'anonymous';
else options.sasl_mechanisms = undefined;

const container = rhea.create_container({id: 'rhea-interop'});
let done = false;
const fail = (obj) => { if (done) return; done = true; out(obj); finish(2); };
const errorFields = (error) => error ? {condition: error.condition, description: error.description} : {};

container.on('connection_open', (context) => {
  out({event: 'connection_open', container: context.connection.remote.open.container_id});
  if (spec.mode === 'publish') publish(context.connection);
  else consume(context.connection);
});
container.on('connection_error', (context) => fail({event: 'connection_error', ...errorFields(context.connection.error)}));
container.on('protocol_error', (context) => fail({event: 'protocol_error', error: String(context.error)}));
container.on('disconnected', (context) => {
  const error = context.error;
  fail({event: 'disconnected', error: error ? String(error.message || error) : 'connection closed',
    code: error && error.code});
});
container.on('error', (error) => fail({event: 'error', condition: error.condition, description: error.description || String(error)}));
const linkError = (context) => fail({event: 'link_error', ...errorFields((context.receiver || context.sender).error)});
container.on('sender_error', linkError);
container.on('receiver_error', linkError);

function closeAndExit() {
  if (done) return;
  done = true;
  connection.close();
  connection.on('connection_close', () => finish(0));
  setTimeout(() => finish(0), 1000).unref();
}

// ------------------------------------------------------------------- publish
function publish(conn) {
  const messages = spec.messages.map((m) => {
    const props = {};
    for (const [name, value] of Object.entries(m.application_properties || {})) props[name] = wrapProperty(value);
    const msg = {application_properties: props, body: rhea.message.data_section(Buffer.from(m.body_hex || '', 'hex'))};
    for (const field of ['ttl', 'durable', 'subject', 'message_id']) if (m[field] !== undefined) msg[field] = m[field];
    return msg;
  });
  let next = 0;
  let outcomes = 0;
  const sender = conn.open_sender({target: {address: spec.address}, snd_settle_mode: spec.presettled ? 1 : 0});
  const settle = (outcome) => (context) => {
    const index = context.delivery.index;
    const error = context.delivery.remote_state && context.delivery.remote_state.error;
    out({event: 'outcome', index, outcome, ...(error ? {error: errorFields(error)} : {})});
    if (++outcomes === messages.length) closeAndExit();
  };

  sender.on('sender_open', (context) => {
    const remote = context.sender.target;  // null when refused (AMQP 1.0 2.6.3)
    const isNull = !remote || (remote.type && remote.type.name === 'Null');
    out({event: 'attached', target: isNull ? null : {address: remote.address}});
  });
  sender.on('accepted', settle('accepted'));
  sender.on('rejected', settle('rejected'));
  sender.on('released', settle('released'));
  sender.on('sendable', () => {
    while (next < messages.length && sender.sendable()) {
      const encoded = rhea.message.encode(messages[next]);
      const delivery = sender.send(encoded, undefined, 0);  // format 0: send these exact bytes
      delivery.index = next;
      out({event: 'sent', index: next, encoded_hex: encoded.toString('hex')});
      next++;
    }
    if (spec.presettled && next === messages.length) closeAndExit();  // no outcomes will come
  });
}

// ------------------------------------------------------------------- consume
function consume(conn) {
  const source = {address: spec.address};
  if (spec.selector !== undefined) source.filter = rhea.filter.selector(spec.selector);
  const receiver = conn.open_receiver({source, credit_window: spec.credit || 100, autoaccept: true});
  let received = 0;
  receiver.on('receiver_open', (context) => {
    // A refused attach carries a null source (AMQP 1.0 2.6.3); rhea hands it out as a typed Null.
    const remote = context.receiver.source;
    const isNull = !remote || (remote.type && remote.type.name === 'Null');
    out({event: 'attached', source: isNull ? null : {address: remote.address, filter: plain(remote.filter)}});
    if (spec.count === 0) setTimeout(closeAndExit, spec.linger_ms === undefined ? 300 : spec.linger_ms);
  });
  receiver.on('message', (context) => {
    const msg = context.message;
    const body = msg.body && msg.body.typecode === 0x75 ? msg.body.content : null;
    out({event: 'message', application_properties: msg._typed_properties || {},
      body_hex: Buffer.isBuffer(body) ? body.toString('hex') : null, raw_hex: msg._raw.toString('hex')});
    if (++received === spec.count) setTimeout(closeAndExit, spec.linger_ms === undefined ? 300 : spec.linger_ms);
  });
}

const connection = container.connect(options);
