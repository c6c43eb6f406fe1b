// ECharts, with only the parts the UI draws (line, bar and graph charts), resized with its box.
import { useEffect, useRef } from "react";
import * as echarts from "echarts/core";
import { BarChart, GraphChart, LineChart } from "echarts/charts";
import { DataZoomComponent, GridComponent, LegendComponent, TooltipComponent } from "echarts/components";
import { CanvasRenderer } from "echarts/renderers";

echarts.use([LineChart, BarChart, GraphChart, GridComponent, TooltipComponent, LegendComponent, DataZoomComponent, CanvasRenderer]);

export type ChartOption = echarts.EChartsCoreOption;

export function Chart({ option, height = 260, label }: { option: ChartOption; height?: number; label: string }) {
  const ref = useRef<HTMLDivElement>(null);
  const chart = useRef<echarts.ECharts | null>(null);
  useEffect(() => {
    if (!ref.current) return;
    chart.current = echarts.init(ref.current);
    const ro = typeof ResizeObserver !== "undefined" ? new ResizeObserver(() => chart.current?.resize()) : null;
    ro?.observe(ref.current);
    return () => {
      ro?.disconnect();
      chart.current?.dispose();
    };
  }, []);
  useEffect(() => {
    chart.current?.setOption(option, { notMerge: true });
  }, [option]);
  return <div ref={ref} role="img" aria-label={label} style={{ width: "100%", height }} data-testid="chart" />;
}
