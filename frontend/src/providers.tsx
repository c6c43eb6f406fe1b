// The providers around the app: the query cache (a 4xx is final, the rest retried once), Ant
// Design's theme and locale, i18n, the session.
import type { ReactNode } from "react";
import { App as AntApp, ConfigProvider } from "antd";
import enUS from "antd/locale/en_US";
import zhCN from "antd/locale/zh_CN";
import { QueryClient, QueryClientProvider } from "@tanstack/react-query";
import { I18nProvider, useI18n, type Lang } from "./i18n";
import { SessionProvider } from "./session";
import { ApiError } from "./api/client";

export function makeQueryClient() {
  return new QueryClient({
    defaultOptions: {
      queries: {
        staleTime: 5_000,
        refetchOnWindowFocus: false,
        // 4xx answers are final; retry the rest once
        retry: (n, err) => !(err instanceof ApiError && err.status < 500) && n < 1,
      },
    },
  });
}

// Colours dark enough for WCAG AA contrast on white (axe-core checks it in tests/e2e).
const THEME = {
  token: {
    colorPrimary: "#1558d6",
    colorLink: "#1558d6",
    colorInfo: "#1558d6",
    colorError: "#c41d1d",
    colorSuccess: "#2f7d12",
    colorWarning: "#a35c00",
    colorTextDescription: "rgba(0, 0, 0, 0.65)",
    colorTextTertiary: "rgba(0, 0, 0, 0.6)",
    colorTextPlaceholder: "rgba(0, 0, 0, 0.6)",
  },
};

function Antd({ children }: { children: ReactNode }) {
  const { lang } = useI18n();
  return (
    <ConfigProvider locale={lang === "zh" ? zhCN : enUS} theme={THEME}>
      <AntApp>{children}</AntApp>
    </ConfigProvider>
  );
}

export function AppProviders({
  children,
  client,
  lang,
}: {
  children: ReactNode;
  client?: QueryClient;
  lang?: Lang;
}) {
  return (
    <QueryClientProvider client={client ?? makeQueryClient()}>
      <I18nProvider lang={lang}>
        <Antd>
          <SessionProvider>{children}</SessionProvider>
        </Antd>
      </I18nProvider>
    </QueryClientProvider>
  );
}
