/**
 * The ids the TCK uses per test (upper-cased test method + field; unset means a random UUID),
 * after the TCK's sample configuration: the datasets, offers and agreements the profile seeds
 * (tck/profile/seed.ts) and scripts (tck/profile/scripts.ts).
 */
const pairs = (prefix: string, rows: Record<string, string[]>) =>
  Object.entries(rows).flatMap(([major, minors]) => minors.map((minor) => `${prefix}_${major}_${minor}`));

const FORMAT = 'HttpData-PULL';

export function tckTestIds(): Record<string, string> {
  const ids: Record<string, string> = {};
  for (const n of ['01', '02', '03']) ids[`CAT_01_${n}_DATASETID`] = `CAT01${n}`;
  for (const test of pairs('CN', {
    '01': ['01', '02', '03', '04'],
    '02': ['01', '02', '03', '04', '05', '06', '07'],
    '03': ['01', '02', '03', '04'],
  })) {
    const dataset = `ACN${test.slice(3).replace('_', '')}`;
    ids[`${test}_DATASETID`] = dataset;
    ids[`${test}_OFFERID`] = `CD123:${dataset}:456`;
  }
  for (const test of pairs('CN_C', {
    '01': ['01', '02', '03', '04'],
    '02': ['01', '02', '03', '04', '05', '06'],
    '03': ['01', '02', '03', '04', '05', '06'],
  })) {
    ids[`${test}_DATASETID`] = `ACNC${test.slice(5).replace('_', '')}`;
  }
  const transfers = {
    '01': ['01', '02', '03', '04', '05'],
    '02': ['01', '02', '03', '04', '05'],
    '03': ['01', '02', '03', '04', '05', '06'],
  };
  for (const test of pairs('TP', transfers)) {
    ids[`${test}_AGREEMENTID`] = `ATP${test.slice(3).replace('_', '')}`;
    ids[`${test}_FORMAT`] = FORMAT;
  }
  for (const test of pairs('TP_C', transfers)) {
    ids[`${test}_AGREEMENTID`] = `ATPC${test.slice(5).replace('_', '')}`;
    ids[`${test}_FORMAT`] = FORMAT;
  }
  return ids;
}
