// The models page (/models): the model registry's catalogue, each row's versions when expanded.
import { Tag } from "antd";
import { api, unwrap, type Schemas } from "../../api/client";
import { useI18n } from "../../i18n";
import { CatalogPage } from "./CatalogPage";
import { ModelVersions } from "./ModelVersions";

export function ModelsPage() {
  const { t } = useI18n();
  return (
    <CatalogPage<Schemas["RegisteredModel"]>
      kind="model"
      title="nav.models"
      empty="catalog.emptyModels"
      queryKey="models"
      fetch={async (project, archived) =>
        unwrap(
          await api.GET("/api/v1/models/", { params: { query: { project, page_size: 200, archived: archived || undefined } } }),
        ).results
      }
      expanded={(m) => <ModelVersions id={m.id} />}
      columns={[
        {
          title: t("catalog.aliases"),
          dataIndex: "aliases",
          render: (a: Record<string, number>) => Object.entries(a ?? {}).map(([k, v]) => <Tag key={k}>{`${k} → v${v}`}</Tag>),
        },
      ]}
    />
  );
}
