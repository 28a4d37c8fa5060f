// Judges one GPU's health from what the agent read about it: the reasons, in words an
// operator can act on, that the control plane must not allocate it.

export const DEFAULT_MAX_TEMPERATURE_C = 85;

export interface HealthReadings {
  temperatureC?: number;
  /** Undefined when the card does not report ECC, which is no evidence of a fault. */
  uncorrectedEcc?: number;
}

export function gpuProblems(
  row: HealthReadings,
  opts: { maxTemperatureC: number } = { maxTemperatureC: DEFAULT_MAX_TEMPERATURE_C },
): string[] {
  const problems: string[] = [];
  // Volatile uncorrected errors mean memory contents were lost since the driver
  // loaded: an engine on this GPU may compute garbage, so it stays out until reset.
  if (row.uncorrectedEcc !== undefined && row.uncorrectedEcc > 0) {
    problems.push(`${row.uncorrectedEcc} uncorrected ECC ${row.uncorrectedEcc === 1 ? 'error' : 'errors'} (volatile)`);
  }
  if (row.temperatureC !== undefined && row.temperatureC > opts.maxTemperatureC) {
    problems.push(`temperature ${row.temperatureC} °C over ${opts.maxTemperatureC} °C`);
  }
  return problems;
}
