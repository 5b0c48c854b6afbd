/**
 * What a point of a given Brick class looks like through the platform protocol: who may write
 * it, its value type and unit, the limits a write must respect, and how the sample backend
 * makes its value move. Brick says what a point measures (its quantity); it says nothing about
 * ranges, so the typical values and limits below are ordinary HVAC figures chosen by hand.
 */
import type { BrickClassIndex } from '../../gateway/brick/class-index.js';
import type { Access, PointRecord } from '../building-backend/building-data.js';
import type { BrickOntology } from './ontology.js';

export type Family = 'sensor' | 'setpoint' | 'parameter' | 'command' | 'status' | 'alarm' | 'point';

type Measure =
  | 'temperature'
  | 'temperature_difference'
  | 'flow'
  | 'humidity'
  | 'pressure'
  | 'power'
  | 'energy'
  | 'position'
  | 'speed'
  | 'ratio'
  | 'gain'
  | 'co2'
  | 'occupancy'
  | 'frequency'
  | 'current'
  | 'voltage'
  | 'time'
  | 'illuminance'
  | 'enthalpy';

/** Brick's six disjoint point branches (research §1.2). */
const FAMILIES: [string, Family][] = [
  ['brick:Alarm', 'alarm'],
  ['brick:Status', 'status'],
  ['brick:Command', 'command'],
  ['brick:Setpoint', 'setpoint'],
  ['brick:Sensor', 'sensor'],
  ['brick:Parameter', 'parameter'],
];

/** brick:hasQuantity values (after skos:broader) → what the point measures. */
const QUANTITY_MEASURES: Record<string, Measure> = {
  'qudtqk:Temperature': 'temperature',
  'qudtqk:DewPointTemperature': 'temperature',
  'brick:Wet_Bulb_Temperature': 'temperature',
  'brick:Differential_Temperature': 'temperature_difference',
  'qudtqk:VolumeFlowRate': 'flow',
  'qudtqk:RelativeHumidity': 'humidity',
  'qudtqk:Pressure': 'pressure',
  'qudtqk:StaticPressure': 'pressure',
  'qudtqk:DynamicPressure': 'pressure',
  'qudtqk:GaugePressure': 'pressure',
  'brick:Differential_Pressure': 'pressure',
  'qudtqk:Power': 'power',
  'qudtqk:ElectricPower': 'power',
  'qudtqk:ActivePower': 'power',
  'qudtqk:Energy': 'energy',
  'qudtqk:ThermalEnergy': 'energy',
  'brick:Electric_Energy': 'energy',
  'brick:Position': 'position',
  'brick:Speed': 'speed',
  'qudtqk:Dimensionless': 'ratio',
  'qudtqk:DimensionlessRatio': 'ratio',
  'brick:CO2_Concentration': 'co2',
  'brick:Occupancy': 'occupancy',
  'qudtqk:Frequency': 'frequency',
  'qudtqk:ElectricCurrent': 'current',
  'qudtqk:Voltage': 'voltage',
  'qudtqk:Time': 'time',
  'qudtqk:Illuminance': 'illuminance',
  'qudtqk:Enthalpy': 'enthalpy',
};

/** When no ancestor states a quantity, the class names still do (e.g. *_Gain_Parameter, *_Ratio_Limit). */
const NAME_MEASURES: [RegExp, Measure][] = [
  [/Gain/, 'gain'],
  [/Differential_Temperature|Temperature_Differential/, 'temperature_difference'],
  [/Temperature/, 'temperature'],
  [/Humidity/, 'humidity'],
  [/Ratio/, 'ratio'],
  [/Pressure/, 'pressure'],
  [/Flow/, 'flow'],
  [/CO2/, 'co2'],
  // Close_Limit / Open_Limit bound a damper or valve's close/open setpoint: a position.
  [/Position|Close|Open/, 'position'],
  [/Speed/, 'speed'],
  [/Demand|Power/, 'power'],
  [/Energy/, 'energy'],
  [/Occupancy/, 'occupancy'],
];

/** QUDT units (research §1.6); SI throughout, as the brief asks, except where the point name says CFM. */
const MEASURE_UNITS: Record<Measure, string> = {
  temperature: 'unit:DEG_C',
  temperature_difference: 'unit:K',
  flow: 'unit:L-PER-SEC',
  humidity: 'unit:PERCENT_RH',
  pressure: 'unit:PA',
  power: 'unit:KiloW',
  energy: 'unit:KiloW-HR',
  position: 'unit:PERCENT',
  speed: 'unit:PERCENT',
  ratio: 'unit:PERCENT',
  gain: 'unit:UNITLESS',
  co2: 'unit:PPM',
  occupancy: 'unit:UNITLESS',
  frequency: 'unit:HZ',
  current: 'unit:A',
  voltage: 'unit:V',
  time: 'unit:SEC',
  illuminance: 'unit:LUX',
  enthalpy: 'unit:KiloJ-PER-KiloGM',
};

/** Limits a write must respect, per measure (min, max, step). */
const WRITE_LIMITS: Partial<Record<Measure, [number, number, number]>> = {
  temperature: [10, 32, 0.5],
  temperature_difference: [0, 10, 0.1],
  humidity: [0, 100, 1],
  pressure: [0, 1500, 5],
  flow: [0, 5000, 5],
  position: [0, 100, 1],
  speed: [0, 100, 1],
  ratio: [0, 100, 1],
  gain: [0, 100, 0.01],
  co2: [400, 2000, 10],
  power: [0, 2000, 1],
};

/** Parameters (limits, freeze protection) legitimately sit outside the comfort range of a setpoint. */
const PARAMETER_TEMPERATURE_LIMITS: [number, number, number] = [-10, 50, 0.5];

const MINIMUM_INTERVAL: Partial<Record<Family, string>> = {
  setpoint: 'PT1M',
  parameter: 'PT15M',
  command: 'PT10S',
};

export interface PointContext {
  /** Canonical Brick class. */
  class: string;
  /** The point's own name (local name), which often says more than a coarse class. */
  id: string;
  /** Whether the point belongs to a terminal unit (VAV box): sets the scale of air flows. */
  onTerminalUnit: boolean;
}

/** What a point's class settles about it: the behavioural fields of a PointRecord, and its family. */
export type PointProfile = Pick<
  PointRecord,
  'access' | 'value_type' | 'is_cumulative' | 'unit' | 'constraints' | 'flow_direction' | 'simulation'
> & { family: Family };

export function pointProfile(
  ctx: PointContext,
  index: BrickClassIndex,
  ontology: BrickOntology,
): PointProfile {
  const family = FAMILIES.find(([root]) => index.isA(ctx.class, root))?.[1] ?? 'point';
  const measure = measureOf(ctx, index, ontology);
  const is = (ancestor: string): boolean => index.isA(ctx.class, ancestor);

  switch (family) {
    case 'alarm':
      return booleanPoint(family, 'read');
    case 'status':
      return is('brick:Mode_Status') ? statesPoint(family, modeStates(ctx.id)) : booleanPoint(family, 'read');
    case 'command':
      // Enable/disable and override commands are momentary triggers: written, never read back.
      if (is('brick:Enable_Command') || is('brick:Disable_Command') || is('brick:Override_Command')) {
        return booleanPoint(family, 'write');
      }
      if (is('brick:Occupancy_Command')) return occupancyCommand();
      if (measure === 'speed' || measure === 'position') return numericPoint(family, measure, ctx);
      return booleanPoint(family, 'read_write');
    case 'sensor':
      if (measure === 'occupancy') return booleanPoint(family, 'read');
      return numericPoint(family, measure, ctx);
    case 'setpoint':
    case 'parameter':
      return numericPoint(family, measure, ctx);
    case 'point':
      // An unclassified point: the backend reports a diagnostic text.
      return statesPoint(family, ['ok', 'warning', 'fault']);
  }
}

function measureOf(ctx: PointContext, index: BrickClassIndex, ontology: BrickOntology): Measure | undefined {
  const fromQuantity = nearestQuantity(ctx.class, ontology);
  const measure = fromQuantity ?? nameMeasure([ctx.class, ...index.ancestorsOf(ctx.class)]);
  // Rice's "occupiedOffset" and "deltaTemperature" points are temperature differences.
  if (measure === 'temperature' && /offset|difference|delta/i.test(ctx.id)) return 'temperature_difference';
  return measure;
}

/** The quantity stated closest to the class, walking up its parents level by level. */
function nearestQuantity(cls: string, ontology: BrickOntology): Measure | undefined {
  let level = [cls];
  const seen = new Set<string>();
  while (level.length > 0) {
    for (const c of level) {
      for (const quantity of ontology.quantities.get(c) ?? []) {
        const measure = quantityMeasure(quantity, ontology);
        if (measure) return measure;
      }
    }
    level.forEach((c) => seen.add(c));
    level = level.flatMap((c) => ontology.index.classes[c]?.parents ?? []).filter((c) => !seen.has(c));
  }
  return undefined;
}

function quantityMeasure(quantity: string, ontology: BrickOntology): Measure | undefined {
  for (
    let q: string | undefined = quantity, hops = 0;
    q !== undefined && hops < 5;
    q = ontology.broaderQuantity.get(q), hops++
  ) {
    const measure = QUANTITY_MEASURES[q];
    if (measure) return measure;
  }
  return undefined;
}

function nameMeasure(classes: Iterable<string>): Measure | undefined {
  for (const c of classes) {
    const found = NAME_MEASURES.find(([pattern]) => pattern.test(c));
    if (found) return found[1];
  }
  return undefined;
}

function booleanPoint(family: Family, access: Access): PointProfile {
  return {
    family,
    access,
    value_type: 'boolean',
    is_cumulative: false,
    ...(access === 'read' ? {} : { constraints: { minimum_interval: MINIMUM_INTERVAL.command ?? 'PT10S' } }),
    simulation: { kind: 'toggle' },
  };
}

function statesPoint(family: Family, states: string[]): PointProfile {
  return {
    family,
    access: 'read',
    value_type: 'string',
    is_cumulative: false,
    simulation: { kind: 'states', states },
  };
}

function modeStates(id: string): string[] {
  if (/econom/i.test(id)) return ['enabled', 'disabled', 'locked_out'];
  if (/vent/i.test(id)) return ['normal', 'optimizing', 'off'];
  return ['auto', 'heating', 'cooling', 'off'];
}

/** BACnet-style multistate: 1 occupied, 2 unoccupied, 3 standby. */
function occupancyCommand(): PointProfile {
  return {
    family: 'command',
    access: 'read_write',
    value_type: 'integer',
    is_cumulative: false,
    unit: 'unit:UNITLESS',
    constraints: { min: 1, max: 3, step: 1, minimum_interval: MINIMUM_INTERVAL.command ?? 'PT10S' },
    simulation: { kind: 'wave', base: 2, amplitude: 1 },
  };
}

function numericPoint(family: Family, measure: Measure | undefined, ctx: PointContext): PointProfile {
  const unit =
    measure === 'flow' && /cfm/i.test(ctx.id)
      ? 'unit:FT3-PER-MIN'
      : measure
        ? MEASURE_UNITS[measure]
        : 'unit:UNITLESS';
  const writable = family === 'setpoint' || family === 'parameter' || family === 'command';
  const limits =
    family === 'parameter' && measure === 'temperature'
      ? PARAMETER_TEMPERATURE_LIMITS
      : measure
        ? WRITE_LIMITS[measure]
        : undefined;
  const typical = typicalValue(measure, ctx, unit);
  // Setpoints and parameters hold still until written; measurements drift.
  const amplitude = writable ? 0 : typical.amplitude;
  // A writable point's value must itself pass the write check, so it sits on the step grid.
  const base = writable && limits ? alignToStep(typical.base, limits) : typical.base;

  if (measure === 'energy' && family === 'sensor') {
    return {
      family,
      access: 'read',
      value_type: 'number',
      is_cumulative: true,
      unit,
      flow_direction: 'consumption',
      simulation: { kind: 'counter', start: 1_250_000, per_hour: typical.base },
    };
  }
  return {
    family,
    access: writable ? 'read_write' : 'read',
    value_type: 'number',
    is_cumulative: false,
    unit,
    ...(writable && limits
      ? {
          constraints: {
            min: limits[0],
            max: limits[1],
            step: limits[2],
            minimum_interval: MINIMUM_INTERVAL[family] ?? 'PT1M',
          },
        }
      : {}),
    ...(measure === 'power' ? { flow_direction: 'consumption' as const } : {}),
    simulation: { kind: 'wave', base, amplitude },
  };
}

function alignToStep(value: number, [min, max, step]: [number, number, number]): number {
  const aligned = min + Math.round((value - min) / step) * step;
  return Number(Math.min(max, Math.max(min, aligned)).toFixed(6));
}

interface Typical {
  base: number;
  amplitude: number;
}

/** Ordinary values for an occupied office building in mild weather. */
function typicalValue(measure: Measure | undefined, ctx: PointContext, unit: string): Typical {
  const text = `${ctx.class} ${ctx.id}`;
  const has = (pattern: RegExp): boolean => pattern.test(text);
  switch (measure) {
    case 'temperature':
      return temperatureValue(has);
    case 'temperature_difference':
      return { base: 1.5, amplitude: 0.5 };
    case 'humidity':
      if (has(/Outside|outdoor/i)) return { base: 60, amplitude: 15 };
      if (has(/High/)) return { base: 60, amplitude: 0 };
      if (has(/Low/)) return { base: 30, amplitude: 0 };
      return { base: 45, amplitude: 6 };
    case 'pressure':
      if (has(/Cutout/)) return { base: 750, amplitude: 0 };
      if (has(/water/i)) return { base: 60_000, amplitude: 4_000 };
      return { base: 250, amplitude: 25 };
    case 'flow':
      if (unit === 'unit:FT3-PER-MIN') return { base: 6_000, amplitude: 1_000 };
      return ctx.onTerminalUnit ? { base: 150, amplitude: 50 } : { base: 2_500, amplitude: 400 };
    case 'power':
      return { base: 350, amplitude: 60 };
    case 'energy':
      // For a counter, the average consumption per hour.
      return { base: 350, amplitude: 0 };
    case 'position':
      if (has(/Close/)) return { base: 10, amplitude: 0 };
      return has(/Max|Limit/) ? { base: 100, amplitude: 0 } : { base: 45, amplitude: 25 };
    case 'speed':
      return { base: 65, amplitude: 15 };
    case 'ratio':
      return { base: 30, amplitude: 5 };
    case 'gain':
      return has(/Integral/) ? { base: 0.15, amplitude: 0 } : { base: 2.5, amplitude: 0 };
    case 'co2':
      return { base: 620, amplitude: 120 };
    case 'frequency':
      return { base: 50, amplitude: 0.05 };
    case 'current':
      return { base: 40, amplitude: 8 };
    case 'voltage':
      return { base: 400, amplitude: 4 };
    case 'illuminance':
      return { base: 450, amplitude: 100 };
    case 'enthalpy':
      return { base: 45, amplitude: 5 };
    case 'time':
      return { base: 300, amplitude: 0 };
    case 'occupancy':
    case undefined:
      return { base: 50, amplitude: 10 };
  }
}

function temperatureValue(has: (pattern: RegExp) => boolean): Typical {
  if (has(/Freeze/)) return { base: 4, amplitude: 0 };
  if (has(/Max_Temperature_Setpoint_Limit|Hi_Limit/)) return { base: 28, amplitude: 0 };
  if (has(/Min_Temperature_Setpoint_Limit|Lo_Limit/)) return { base: 16, amplitude: 0 };
  if (has(/Outside|outdoor|oat_/i)) return { base: 12, amplitude: 6 };
  if (has(/Chilled|Ice|CHW/))
    return has(/Return|Entering/) ? { base: 12, amplitude: 0.6 } : { base: 7, amplitude: 0.5 };
  if (has(/Hot_Water|HW/))
    return has(/Return|Entering/) ? { base: 45, amplitude: 3 } : { base: 60, amplitude: 3 };
  if (has(/Water|GLY|Glycol/i)) return { base: 20, amplitude: 4 };
  if (has(/Mixed/)) return { base: 16, amplitude: 2 };
  if (has(/Return_Air|Exhaust/)) return { base: 23, amplitude: 1 };
  if (has(/Supply_Air|Discharge|Preheat|supply_air/)) return { base: 14, amplitude: 1.5 };
  return { base: 21.5, amplitude: 1.5 };
}
