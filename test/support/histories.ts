import fs from 'node:fs';
import path from 'node:path';
import { PROJECT_ROOT } from '../../config.js';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import type { RunningConnector } from '../../main.js';

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
