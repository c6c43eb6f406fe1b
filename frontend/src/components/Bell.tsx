// The bell in the header: the events of the person's subscriptions (any channel) in the current
// tenant, the latest from the inbox and new ones live; a count of those not yet seen.
import { useEffect, useMemo, useState } from "react";
import { Link } from "react-router-dom";
import { Badge, Button, List, Popover, Typography } from "antd";
import { BellOutlined } from "@ant-design/icons";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { useI18n } from "../i18n";
import { useSession } from "../session";
import { fmtTime } from "./common";
import { useBellSocket, type BellItem } from "./useJobSocket";

const seenKey = (user: string) => `torus.bell.seen.${user}`;

export function Bell() {
  const { t } = useI18n();
  const { me, tenant } = useSession();
  const user = me?.user?.username ?? "";
  const [live, setLive] = useState<BellItem[]>([]);
  const [seen, setSeen] = useState(() => localStorage.getItem(seenKey(user)) ?? "");
  useEffect(() => setSeen(localStorage.getItem(seenKey(user)) ?? ""), [user]);
  const inbox = useQuery({
    queryKey: ["bell-inbox", user],
    enabled: !!user,
    queryFn: async () => unwrap(await api.GET("/api/v1/subscriptions/inbox/")).items as unknown as BellItem[],
  });
  useBellSocket(!!user, (m) => {
    if (m.type === "items") setLive((prev) => [...m.items, ...prev].slice(0, 50));
  });
  const items = useMemo(() => {
    const all = [...live, ...(inbox.data ?? [])].filter((i) => !tenant || i.tenant === tenant.id);
    const once = new Map(all.map((i) => [i.event_id, i]));
    return [...once.values()].sort((a, b) => b.at.localeCompare(a.at)).slice(0, 50);
  }, [live, inbox.data, tenant]);
  const unseen = items.filter((i) => i.at > seen).length;
  const markSeen = (open: boolean) => {
    if (!open || !items.length) return;
    localStorage.setItem(seenKey(user), items[0].at);
    setSeen(items[0].at);
  };
  const list = (
    <List
      size="small"
      style={{ width: 380, maxHeight: 420, overflow: "auto" }}
      locale={{ emptyText: t("bell.empty") }}
      dataSource={items}
      renderItem={(i) => (
        <List.Item key={i.event_id} data-testid="bell-item">
          <List.Item.Meta
            title={
              <span>
                <Link to={i.deployment ? `/deployments/${i.deployment}` : `/jobs/${i.job}`}>{i.name}</Link>{" "}
                {t(`bell.${i.event}` as never) || i.event}
              </span>
            }
            description={
              <>
                {i.reason && <Typography.Text type="secondary">{i.reason}</Typography.Text>}
                <div>
                  {i.project} · {fmtTime(i.at)}
                </div>
              </>
            }
          />
        </List.Item>
      )}
    />
  );
  return (
    <Popover
      content={list}
      title={
        <span style={{ display: "flex", justifyContent: "space-between" }}>
          {t("bell.title")} <Link to="/notifications">{t("bell.manage")}</Link>
        </span>
      }
      trigger="click"
      placement="bottomRight"
      onOpenChange={markSeen}
    >
      <Badge count={unseen} size="small" data-testid="bell-count">
        <Button type="text" icon={<BellOutlined />} aria-label={t("bell.title")} data-testid="bell" />
      </Badge>
    </Popover>
  );
}
