// Names the GPU class a host offers (the key catalog profiles are written against)
// from the marketing name nvidia-smi prints. Shared by real and simulated discovery.

// Word boundaries keep H200 from matching GH200 and L4 from matching L40S, so the
// order of this table does not matter.
const GPU_CLASSES: { pattern: RegExp; gpuClass: string }[] = [
  { pattern: /\bGB200\b/, gpuClass: 'GB200' },
  { pattern: /\bB200\b/, gpuClass: 'B200' },
  { pattern: /\bB100\b/, gpuClass: 'B100' },
  { pattern: /\bGH200\b/, gpuClass: 'GH200' },
  { pattern: /\bH200\b/, gpuClass: 'H200' },
  { pattern: /\bH100\b/, gpuClass: 'H100' },
  { pattern: /\bH800\b/, gpuClass: 'H800' },
  { pattern: /\bH20\b/, gpuClass: 'H20' },
  { pattern: /\bA100\b/, gpuClass: 'A100' },
  { pattern: /\bA800\b/, gpuClass: 'A800' },
  { pattern: /\bA10G\b/, gpuClass: 'A10G' },
  { pattern: /\bA10\b/, gpuClass: 'A10' },
  { pattern: /\bA30\b/, gpuClass: 'A30' },
  { pattern: /\bA40\b/, gpuClass: 'A40' },
  { pattern: /\bL40S\b/, gpuClass: 'L40S' },
  { pattern: /\bL40\b/, gpuClass: 'L40' },
  { pattern: /\bL4\b/, gpuClass: 'L4' },
  { pattern: /\bV100\b/, gpuClass: 'V100' },
  { pattern: /\bT4\b/, gpuClass: 'T4' },
  { pattern: /\bRTX 6000 Ada\b/, gpuClass: 'RTX6000Ada' },
  { pattern: /\bRTX A6000\b/, gpuClass: 'A6000' },
];

/**
 * "NVIDIA H100 80GB HBM3" → "H100"; a name the table does not know gives its first word, with
 * anything outside common/safe-name.ts's spelling replaced by "-" (the class reaches
 * visibility queries, and a driver's name is not ours to trust).
 */
export function gpuClassFromName(name: string): string {
  const known = GPU_CLASSES.find(({ pattern }) => pattern.test(name));
  if (known) return known.gpuClass;
  const word =
    name
      .trim()
      .replace(/^NVIDIA\s+/i, '')
      .split(/\s+/)[0] ?? '';
  return word
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 63);
}
