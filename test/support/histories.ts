import fs from 'node:fs';
import path from 'node:path';
import { PROJECT_ROOT } from '../../config.js';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import type { RunningConnector } from '../../main.js';
import { requireStack } from './stack.js';

/**
 * Every payload of a history as it was before the connector encrypted it
 * (auth/payload-encryption.ts), in place: recorded histories replay without the run's key.
 */
export async function decryptPayloads(node: unknown, connector: RunningConnector): Promise<void> {
  if (node === null || typeof node !== 'object' || ArrayBuffer.isView(node)) return;
  for (const [key, value] of Object.entries(node as Record<string, unknown>)) {
    const payload = value as { metadata?: Record<string, Uint8Array>; data?: Uint8Array } | null;
    if (payload && typeof payload === 'object' && payload.metadata && 'data' in payload) {
      const [plain] = await connector.dataConverter.payloadCodecs![0]!.decode([payload]);
      (node as Record<string, unknown>)[key] = plain;
    } else await decryptPayloads(value, connector);
  }
}

/** With RECORD_HISTORIES=1, saves a finished workflow's history for the replay suite. */
export async function recordHistory(
  connector: RunningConnector,
  workflowId: string,
  name: string,
): Promise<void> {
  if (process.env.RECORD_HISTORIES !== '1') return;
  const history = await connector.temporal.workflow.getHandle(workflowId).fetchHistory();
  await decryptPayloads(history, connector);
  const file = path.join(PROJECT_ROOT, 'test', 'histories', `${name}.json`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  // The proto3 JSON form, which Worker.runReplayHistory reads back.
  fs.writeFileSync(file, `${JSON.stringify(JSON.parse(historyToJSON(history)), null, 1)}\n`);
}

/**
 * Replays the history of every negotiation the given connectors ran (finished or still running)
 * against the current workflow code, as a restarted worker would: repeats, races and decisions
 * included. Answers the failures, one line each (empty when all replay), and how many ran.
 */
export async function replayNegotiations(
  connectors: RunningConnector[],
): Promise<{ count: number; failures: string[] }> {
  const failures: string[] = [];
  let count = 0;
  // Per connector: its payloads are encrypted with its own key.
  for (const connector of connectors) {
    const histories = [];
    const rows: Array<{ workflow_id: string }> = await connector.db('negotiations').select('workflow_id');
    for (const { workflow_id: workflowId } of rows)
      histories.push({
        workflowId,
        history: await connector.temporal.workflow.getHandle(workflowId).fetchHistory(),
      });
    count += histories.length;
    for await (const result of Worker.runReplayHistories(
      { workflowBundle: requireStack().workflowBundle, dataConverter: connector.dataConverter },
      histories,
    ))
      if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  return { count, failures };
}
