// A real Connect client (@connectrpc/connect-node) calling `deadline service` with a deadline.
// Usage: node client.mjs BASE_URL TIMEOUT_MS
import { create, createFileRegistry } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, file_google_protobuf_empty } from "@bufbuild/protobuf/wkt";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

const [baseUrl, timeoutArg] = process.argv.slice(2);
const timeoutMs = Number(timeoutArg);

// A service `demo.Work` with one unary method `Do(Empty) returns (Empty)`, described at run time
// so no code generation is needed.
const file = create(FileDescriptorProtoSchema, {
  name: "demo/work.proto",
  package: "demo",
  syntax: "proto3",
  dependency: ["google/protobuf/empty.proto"],
  service: [{
    name: "Work",
    method: [{ name: "Do", inputType: ".google.protobuf.Empty", outputType: ".google.protobuf.Empty" }],
  }],
});
const registry = createFileRegistry(file, (name) =>
  name === "google/protobuf/empty.proto" ? file_google_protobuf_empty : undefined);
const service = registry.getService("demo.Work");

const transport = createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: false });
const client = createClient(service, transport);

const started = performance.now();
let result;
try {
  await client.do({}, { timeoutMs });
  result = { ok: true };
} catch (err) {
  const e = ConnectError.from(err);
  result = { ok: false, code: Code[e.code], message: e.rawMessage };
}
result.elapsed_ms = Math.round(performance.now() - started);
console.log(JSON.stringify(result));
