import fs from 'node:fs';
import path from 'node:path';
import { PROJECT_ROOT } from '../../config.js';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import type { RunningConnector } from '../../main.js';
import { requireStack } from './stack.js';

/** With RECORD_HISTORIES=1, saves a finished workflow's history for the replay suite. */
export async function recordHistory(
  connector: RunningConnector,
  workflowId: string,
  name: string,
): Promise<void> {
  if (process.env.RECORD_HISTORIES !== '1') return;
  const history = await connector.temporal.workflow.getHandle(workflowId).fetchHistory();
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
  const histories = [];
  for (const connector of connectors) {
    const rows: Array<{ workflow_id: string }> = await connector.db('negotiations').select('workflow_id');
    for (const { workflow_id: workflowId } of rows)
      histories.push({
        workflowId,
        history: await connector.temporal.workflow.getHandle(workflowId).fetchHistory(),
      });
  }
  const failures: string[] = [];
  for await (const result of Worker.runReplayHistories(
    { workflowBundle: requireStack().workflowBundle },
    histories,
  ))
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  return { count: histories.length, failures };
}
