/**
 * ISO 8601 durations with the units W, D, H, M, S only (spec: retry_after, max_age,
 * minimum_interval): `P2D`, `PT15M`, `P1W`, `PT0.5S`. Years and months are refused (their
 * length varies). Returns milliseconds, or null when the text is not such a duration.
 */
const DURATION =
  /^P(?!$)(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?!$)(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/;

export function parseDurationMs(text: string): number | null {
  const m = DURATION.exec(text);
  if (!m) return null;
  const [w, d, h, min, s] = m.slice(1).map((v) => (v === undefined ? 0 : Number(v))) as [
    number,
    number,
    number,
    number,
    number,
  ];
  return Math.round(((((w * 7 + d) * 24 + h) * 60 + min) * 60 + s) * 1000);
}

export function formatDuration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const d = Math.floor(s / 86400);
  const rest = s % 86400;
  const h = Math.floor(rest / 3600);
  const m = Math.floor((rest % 3600) / 60);
  const sec = rest % 60;
  const time = `${h ? `${h}H` : ''}${m ? `${m}M` : ''}${sec ? `${sec}S` : ''}`;
  return `P${d ? `${d}D` : ''}${time ? `T${time}` : d ? '' : 'T0S'}`;
}
