// The payload converter every llmgw Client and Worker uses (workers load it by path,
// so it also runs inside the workflow sandbox). protobuf-es messages travel as
// `json/protobuf` with `messageType`, which the Temporal Web UI shows as readable JSON;
// everything else falls through to the SDK's defaults, so plain JSON input from the
// Temporal CLI or the UI's start form still works.
import {
  BinaryPayloadConverter,
  CompositePayloadConverter,
  JsonPayloadConverter,
  METADATA_ENCODING_KEY,
  METADATA_MESSAGE_TYPE_KEY,
  UndefinedPayloadConverter,
  ValueError,
  encodingTypes,
  type Payload,
  type PayloadConverterWithEncoding,
} from '@temporalio/common';
import { decode, encode } from '@temporalio/common/lib/encoding';
import { createRegistry, fromJsonString, isMessage, toJsonString, type DescMessage, type Message } from '@bufbuild/protobuf';
import { file_llmgw_v1_gpu } from '../proto/gen/llmgw/v1/gpu_pb.js';
import { file_llmgw_v1_shard } from '../proto/gen/llmgw/v1/shard_pb.js';
import { file_llmgw_v1_register } from '../proto/gen/llmgw/v1/register_pb.js';
import { file_llmgw_v1_admin } from '../proto/gen/llmgw/v1/admin_pb.js';

const registry = createRegistry(file_llmgw_v1_gpu, file_llmgw_v1_shard, file_llmgw_v1_register, file_llmgw_v1_admin);

/** Converts llmgw.v1 protobuf-es messages to and from `json/protobuf` payloads. */
export class ProtobufEsJsonPayloadConverter implements PayloadConverterWithEncoding {
  public readonly encodingType = encodingTypes.METADATA_ENCODING_PROTOBUF_JSON;

  toPayload(value: unknown): Payload | undefined {
    if (!isMessage(value)) return undefined;
    const schema = registry.getMessage(value.$typeName);
    // A message from outside our contract is not ours to encode; the JSON converter would
    // silently drop its type, so say so instead.
    if (!schema) throw new ValueError(`protobuf message ${value.$typeName} is not part of the llmgw.v1 contract`);
    return {
      metadata: {
        [METADATA_ENCODING_KEY]: encode(this.encodingType),
        [METADATA_MESSAGE_TYPE_KEY]: encode(value.$typeName),
      },
      data: encode(toJsonString(schema, value as Message)),
    };
  }

  fromPayload<T>(payload: Payload): T {
    const typeBytes = payload.metadata?.[METADATA_MESSAGE_TYPE_KEY];
    if (!typeBytes) throw new ValueError('json/protobuf payload without messageType');
    const typeName = decode(typeBytes);
    const schema: DescMessage | undefined = registry.getMessage(typeName);
    if (!schema) throw new ValueError(`unknown protobuf message type ${typeName}: not in the llmgw.v1 contract`);
    // ignoreUnknownFields: a newer agent may send fields this control plane does not know;
    // unknown enum values become UNSPECIFIED, which the domain conversions treat as Failed.
    return fromJsonString(schema, decode(payload.data ?? new Uint8Array()), { ignoreUnknownFields: true }) as T;
  }
}

export const payloadConverter = new CompositePayloadConverter(
  new UndefinedPayloadConverter(),
  new BinaryPayloadConverter(),
  new ProtobufEsJsonPayloadConverter(),
  new JsonPayloadConverter(),
);
