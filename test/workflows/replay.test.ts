/**
 * Replays recorded workflow histories against the current workflow code: a change that would
 * break running workflows (non-determinism) fails here. Histories live in test/histories/;
 * `RECORD_HISTORIES=1 npm test` re-records them from the integration tests that produce them.
 */
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from '@temporalio/worker';
import { requireStack } from '../support/stack.js';
import { PROJECT_ROOT } from '../../config.js';

const dir = path.join(PROJECT_ROOT, 'test', 'histories');

describe('workflow histories replay against the current code', () => {
  const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')) : [];

  it('has recorded histories to replay', () => {
    expect(files.length).to.be.at.least(1);
  });

  for (const file of files) {
    it(`replays ${file}`, async () => {
      const history = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
      await Worker.runReplayHistory({ workflowBundle: requireStack().workflowBundle }, history, file);
    });
  }
});
