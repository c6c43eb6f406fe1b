// A page that throws shows an error state (and a way back) instead of a blank screen.
import { Component, type ReactNode } from "react";
import { Button, Result } from "antd";

export class ErrorBoundary extends Component<{ children: ReactNode; resetKey: string }, { error: Error | null }> {
  state = { error: null as Error | null };
  static getDerivedStateFromError(error: Error) {
    return { error };
  }
  componentDidUpdate(prev: { resetKey: string }) {
    if (prev.resetKey !== this.props.resetKey && this.state.error) this.setState({ error: null });
  }
  render() {
    if (!this.state.error) return this.props.children;
    return (
      <Result
        status="error"
        title="Something went wrong / 出错了"
        subTitle={this.state.error.message}
        extra={<Button onClick={() => window.location.reload()}>Reload / 重新加载</Button>}
      />
    );
  }
}
