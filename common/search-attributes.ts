// Typed keys for llmgw's search attributes (names and types in common/names.ts).
// Safe to import from workflows.
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const SA = {
  deployment: defineSearchAttributeKey('LlmgwDeployment', SearchAttributeType.KEYWORD),
  model: defineSearchAttributeKey('LlmgwModel', SearchAttributeType.KEYWORD),
  state: defineSearchAttributeKey('LlmgwState', SearchAttributeType.KEYWORD),
  nodes: defineSearchAttributeKey('LlmgwNodes', SearchAttributeType.KEYWORD_LIST),
  gpuClass: defineSearchAttributeKey('LlmgwGpuClass', SearchAttributeType.KEYWORD),
  freeGpus: defineSearchAttributeKey('LlmgwFreeGpus', SearchAttributeType.INT),
} as const;
