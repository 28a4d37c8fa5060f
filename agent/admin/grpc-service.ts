// The one boundary between protobuf-es service descriptors and grpc-js: turns a
// generated GenService into a grpc-js ServiceDefinition (binary protobuf on the wire),
// so server and client share one definition and no .proto is loaded at run time.
import type { ServiceDefinition, MethodDefinition } from '@grpc/grpc-js';
import { fromBinary, toBinary, type DescMessage, type DescService, type MessageShape } from '@bufbuild/protobuf';

export function grpcServiceDefinition(service: DescService): ServiceDefinition {
  const definition: Record<string, MethodDefinition<unknown, unknown>> = {};
  for (const method of service.methods) {
    definition[method.localName] = {
      path: `/${service.typeName}/${method.name}`,
      requestStream: method.methodKind === 'client_streaming' || method.methodKind === 'bidi_streaming',
      responseStream: method.methodKind === 'server_streaming' || method.methodKind === 'bidi_streaming',
      requestSerialize: serializer(method.input),
      requestDeserialize: deserializer(method.input),
      responseSerialize: serializer(method.output),
      responseDeserialize: deserializer(method.output),
      originalName: method.name,
    };
  }
  return definition as ServiceDefinition;
}

function serializer<D extends DescMessage>(schema: D): (message: unknown) => Buffer {
  return (message) => Buffer.from(toBinary(schema, message as MessageShape<D>));
}

function deserializer<D extends DescMessage>(schema: D): (bytes: Buffer) => MessageShape<D> {
  return (bytes) => fromBinary(schema, bytes);
}
