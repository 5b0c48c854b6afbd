import { expect } from 'chai';
import { formatReport, parseJunitXml, splitDisplayName, summarize } from '../../tck/report.js';

const XML = `<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="JUnit Jupiter" tests="4" skipped="1" failures="1" errors="0" time="3.2">
<testcase name="cat_01_01()" classname="org.eclipse.dataspacetck.dsp.verification.metadata.Metadata01Test" time="0.057">
<system-out><![CDATA[
unique-id: [engine:junit-jupiter]/[class:x]/[method:cat_01_01()]
display-name: MET:01-01: Verify metadata request
]]></system-out>
</testcase>
<testcase name="cn_01_04()" classname="org.eclipse.dataspacetck.dsp.verification.cn.ContractNegotiationProvider01Test" time="15.2">
<failure message="java.lang.RuntimeException: Timeout waiting for state &quot;AGREED&quot;" type="java.lang.RuntimeException"><![CDATA[java.lang.RuntimeException: Timeout
	at x.y(Z.java:1)
]]></failure>
<system-out><![CDATA[
display-name: CN:01-04: Verify contract request, provider agreement & more
]]></system-out>
</testcase>
<testcase name="tp_02_04()" classname="org.eclipse.dataspacetck.dsp.verification.tp.TransferProcessProvider02Test" time="0">
<skipped><![CDATA[is @Disabled]]></skipped>
<system-out><![CDATA[
display-name: TP:02-04: Verify transfer request, consumer suspended
]]></system-out>
</testcase>
<testcase name="tp_c_01_01()" classname="org.eclipse.dataspacetck.dsp.verification.tp.TransferProcessConsumer01Test" time="1.5">
<system-out><![CDATA[
display-name: TP_C:01-01: Verify transfer request, provider started, provider terminated
]]></system-out>
</testcase>
</testsuite>`;

describe('TCK report (tck/report.ts)', () => {
  it('reads id, group, outcome and the first line of a failure from the JUnit XML', () => {
    const results = parseJunitXml(XML);
    expect(results.map((r) => [r.id, r.group, r.outcome])).to.deep.equal([
      ['MET:01-01', 'MET', 'passed'],
      ['CN:01-04', 'CN', 'failed'],
      ['TP:02-04', 'TP', 'skipped'],
      ['TP_C:01-01', 'TP_C', 'passed'],
    ]);
    const failed = results[1]!;
    expect(failed.reason).to.equal('java.lang.RuntimeException: Timeout waiting for state "AGREED"');
    expect(failed.title).to.equal('Verify contract request, provider agreement & more');
    expect(failed.detail).to.include('at x.y(Z.java:1)');
    expect(failed.seconds).to.equal(15.2);
  });

  it('splits display names, including groups with an underscore', () => {
    expect(splitDisplayName('CN_C:03-06: Verify it')).to.deep.equal({
      id: 'CN_C:03-06',
      group: 'CN_C',
      title: 'Verify it',
    });
    expect(splitDisplayName('something else').group).to.equal('OTHER');
  });

  it('counts per group and closes with the line .ci/run reads', () => {
    const results = parseJunitXml(XML);
    const s = summarize(results);
    expect([s.passed, s.failed, s.skipped]).to.deep.equal([2, 1, 1]);
    expect(s.byGroup.map((g) => g.group)).to.deep.equal(['MET', 'CN', 'TP', 'TP_C']);
    const lines = formatReport(results);
    expect(lines).to.include('FAIL  CN:01-04   Verify contract request, provider agreement & more');
    expect(lines).to.include('CN    0 passed, 1 failed');
    expect(lines).to.include('TP    0 passed, 0 failed, 1 skipped (disabled in the TCK)');
    expect(lines.at(-1)).to.equal('TCK result: 2 passed, 1 failed, 1 skipped');
  });

  it('finds nothing in a report without test cases', () => {
    expect(parseJunitXml('<testsuite tests="0"></testsuite>')).to.deep.equal([]);
  });
});
