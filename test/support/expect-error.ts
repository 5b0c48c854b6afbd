import { expect } from 'chai';
import type { Answer } from './http.js';

/** Asserts the management error shape: the status, the stable code, and a message for people. */
export function expectError(answer: Answer, status: number, code: string, messageIncludes?: string | RegExp) {
  expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
  expect(answer.body).to.be.an('object').with.keys('error');
  expect(answer.body.error).to.have.keys('code', 'message');
  expect(answer.body.error.code).to.equal(code);
  expect(answer.body.error.message).to.be.a('string').and.not.empty;
  expect(answer.body.error.message).not.to.match(/\n\s+at /, 'no stack trace reaches a caller');
  if (typeof messageIncludes === 'string') expect(answer.body.error.message).to.include(messageIncludes);
  else if (messageIncludes) expect(answer.body.error.message).to.match(messageIncludes);
}
