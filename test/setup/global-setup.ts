// Placeholder global setup; replaced by the real dev-server harness.
export default async function setup(): Promise<void> {}
